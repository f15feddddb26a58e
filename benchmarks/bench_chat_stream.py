"""Token streaming and the Ollama API of ``psirag serve``: a streamed chat's time to the first
piece and to the first answer piece against the time to the whole answer, through the official
``openai`` client, and round trips of the official ``ollama`` client.

The LLM is the tests' scripted OpenAI-compatible server on 127.0.0.1, streaming each reply one
word at a time with a fixed delay between words (a model writing at 1/delay words a second); the
agent is the real one (two model calls per question: a retrieval, then a nine-word answer) over
the tests' three-document index with the hash embedder, so the numbers are the server's and the
agent's overhead plus the scripted model's writing time. A second question gets a wrong answer
at once, which the agent's check turns down (a revision, then a second call). Bounded: a fixed
number of questions.

Usage: nice -n 10 python benchmarks/bench_chat_stream.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, machine_info, write_result

# the tests' helpers: the scripted LLM, the fixture index, one ServerProcess (tests/support)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import FakeOpenAIServer, ServerProcess, build_index

from psirag.server.answer_stream import REVISED

QUESTION = "Where is Mount Etna?"
TURNED_DOWN = "What is Mount Etna?"
RIGHT = "an active volcano on the east coast of Sicily"
WRONG = "the lost city of Atlantis somewhere under the sea"


def scripted_model(body: dict[str, Any]) -> str:
    """QUESTION: a retrieval, then the answer; TURNED_DOWN: a wrong answer at once (no document
    says it: the agent checks it and asks again), then the answer."""
    messages = body.get("messages") or []
    text = "\n".join(str(m.get("content", "")) for m in messages)
    if not any(m.get("role") == "assistant" for m in messages):
        if TURNED_DOWN in text:
            return f"Thought: I remember this one.\nAnswer: {WRONG} [1]"
        return "Thought: Etna is a volcano; where is it?\nRetrieve: Mount Etna Sicily"
    return f"Thought: The documents say where Mount Etna is.\nAnswer: {RIGHT} [1]"


DELAYS = (0.02, 0.1)
"""Seconds between the scripted model's words (50 and 10 words a second)."""


def streamed_chat(client: Any, question: str = QUESTION) -> dict[str, float]:
    """One streamed chat: seconds to the first piece (thinking), to the first answer piece, to
    the revision mark (if any), to the end."""
    start = time.perf_counter()
    first = first_content = revised = None
    stream = client.chat.completions.create(
        model="psirag", messages=[{"role": "user", "content": question}], stream=True
    )
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        now = time.perf_counter() - start
        if first is None and ((delta.model_extra or {}).get("reasoning_content") or delta.content):
            first = now
        if first_content is None and delta.content:
            first_content = now
        if revised is None and delta.content == REVISED:
            revised = now
    end = time.perf_counter() - start
    return {
        "first_piece": first or end,
        "first_answer_piece": first_content or end,
        "revised": revised or end,
        "whole": end,
    }


def plain_chat(client: Any, question: str = QUESTION) -> float:
    start = time.perf_counter()
    client.chat.completions.create(model="psirag", messages=[{"role": "user", "content": question}])
    return time.perf_counter() - start


def timed(fn: Any, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="questions per setting")
    args = parser.parse_args()
    import httpx
    import ollama
    import openai

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(scripted_model) as llm:
        folder = Path(tmp) / "index"
        build_index(folder)
        server_args = ["--llm", f"openai:{llm.base_url}#fake", "--retries", "0"]
        with ServerProcess(folder, server_args, hash_embedder=True) as server:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="-", max_retries=0)
            plain_chat(client)  # warm up
            for delay in DELAYS:
                llm.token_delay = delay
                runs = [streamed_chat(client) for _ in range(args.repeats)]
                plain = [plain_chat(client) for _ in range(args.repeats)]
                rows.append(
                    {
                        "words_per_second": round(1 / delay),
                        "first_piece_ms": ms([r["first_piece"] for r in runs]),
                        "first_answer_piece_ms": ms([r["first_answer_piece"] for r in runs]),
                        "whole_streamed_ms": ms([r["whole"] for r in runs]),
                        "whole_plain_ms": ms(plain),
                    }
                )
            llm.token_delay = DELAYS[0]
            runs = [streamed_chat(client, TURNED_DOWN) for _ in range(args.repeats)]
            plain = [plain_chat(client, TURNED_DOWN) for _ in range(args.repeats)]
            turned_down = {
                "words_per_second": round(1 / DELAYS[0]),
                "first_answer_piece_ms": ms([r["first_answer_piece"] for r in runs]),
                "revised_ms": ms([r["revised"] for r in runs]),
                "whole_streamed_ms": ms([r["whole"] for r in runs]),
                "whole_plain_ms": ms(plain),
            }
            llm.token_delay = 0.0
            ol = ollama.Client(host=server.url)
            web = httpx.Client()
            messages = [{"role": "user", "content": QUESTION}]
            repeats = max(args.repeats * 4, 10)
            trips = {
                "version (httpx)": ms(timed(lambda: web.get(f"{server.url}/api/version"), repeats)),
                "list (/api/tags)": ms(timed(ol.list, repeats)),
                "chat, not streamed": ms(
                    timed(lambda: ol.chat(model="psirag", messages=messages), repeats)
                ),
                "chat, streamed": ms(
                    timed(
                        lambda: list(ol.chat(model="psirag", messages=messages, stream=True)),
                        repeats,
                    )
                ),
                "generate, not streamed": ms(
                    timed(lambda: ol.generate(model="psirag", prompt=QUESTION), repeats)
                ),
            }
    result = {
        "machine": machine_info(),
        "repeats": args.repeats,
        "ollama_repeats": repeats,
        "streaming": rows,
        "turned_down": turned_down,
        "ollama_ms": trips,
    }
    path = write_result("chat_stream.json", result)
    from report import reflow  # the line width of BENCHMARKS.md

    (RESULTS / "section_chat_stream.md").write_text(reflow(section(result)), encoding="utf-8")
    print(section(result))
    print(f"wrote {path}")
    return 0


def section(r: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {x['words_per_second']} | {x['first_piece_ms']} | {x['first_answer_piece_ms']} | "
        f"{x['whole_streamed_ms']} | {x['whole_plain_ms']} |"
        for x in r["streaming"]
    )
    trips = "\n".join(f"| {name} | {value} |" for name, value in r["ollama_ms"].items())
    t = r.get("turned_down")
    turned = (
        f"A first answer that the agent turns down ({t['words_per_second']} words/s; the "
        "model's first reply is a wrong answer, which the agent checks against the documents "
        "and asks about again): its first words stream at "
        f"{t['first_answer_piece_ms']} ms, the revision mark (`psirag_revised`) comes at "
        f"{t['revised_ms']} ms, and the whole reply at {t['whole_streamed_ms']} ms "
        f"({t['whole_plain_ms']} ms not streamed)."
        if t
        else ""
    )
    load = r["machine"].get("loadavg_at_end", "?")
    return f"""## Chat token streaming and the Ollama API (scripted LLM, no model)

`nice -n 10 python benchmarks/bench_chat_stream.py` serves the tests' three-document index with
the real agent and a scripted OpenAI-compatible LLM on 127.0.0.1 that streams its replies one
word at a time (two model calls per question: a retrieval, then a reply whose last line is a
nine-word answer after a nine-word thought). Through the
official `openai` client, {r["repeats"]} streamed and {r["repeats"]} plain chats per writing
speed, medians: the first streamed piece (the model's output as `reasoning_content`), the first
piece of the answer (`content`), the whole streamed answer, and the same chat not streamed (the
scripted model then takes as long to write the whole reply before it answers).

| words/s | first piece ms | first answer piece ms | whole (streamed) ms | whole (not streamed) ms |
|---|---|---|---|---|
{rows}

{turned}

- The first piece comes after about one word of the first model call: a chat front end shows
  the agent's work at once instead of an empty bubble. The answer (`content`) starts while the
  model writes it (one word behind, and without the citation labels, which the reply
  renumbers): its first piece comes after the first words of the last call, not after the
  whole reply; the markers and the sources follow when the episode ends, so the whole answer
  takes as long as before.
- Not measured with a real model: the local 1.5B GGUF model and llama-cpp-python are not on
  this machine. With it (about 25 s a reply) the first piece would come after the prompt is read
  and one token written, and the answer's first words after the last call's prompt is read and
  its thought written.

Round trips of the official `ollama` client ({r["ollama_repeats"]} calls each, median ms; chat and
generate run the agent with the scripted model answering at once):

| call | median ms |
|---|---|
{trips}

Load average at the end: {load}, on 2 cores shared with other jobs: absolute times are
pessimistic.
"""


if __name__ == "__main__":
    raise SystemExit(main())
