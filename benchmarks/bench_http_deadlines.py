"""Wall time of ``psirag ask`` against a server that sleeps, and one that trickles a byte every
10 s (issue 11 item 3): how long until the user gets an error.

The servers are the scripted loopback server of the tests; the index is built through the same
server's embeddings endpoint, so nothing but the standard library and psirag is needed. Each case
runs ``psirag ask`` as a subprocess, killed after ``--cap`` seconds (a hang is reported as such).

    python benchmarks/bench_http_deadlines.py --extra "--timeout 2 --retries 1"
    PSIRAG_SRC=/path/to/older/src python benchmarks/bench_http_deadlines.py --extra ""
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# the tests' scripted OpenAI-compatible server (tests/support, not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import FakeOpenAIServer, Reply

CORPUS = {
    "volcano.txt": "Vesuvius destroyed Pompeii with ash in the year 79.",
    "bread.txt": "Bread dough rises when yeast ferments the sugars in flour.",
}


def _run(argv: list[str], env: dict[str, str], cap: float) -> tuple[float, int | None, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _out, err = proc.communicate(timeout=cap)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        code = None
    return time.perf_counter() - start, code, err.strip().splitlines()[-1:][0] if err else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--extra", default="--timeout 2 --retries 1", help="flags given to ask")
    parser.add_argument("--cap", type=float, default=600.0, help="kill ask after this many s")
    parser.add_argument("--trickle", type=float, default=10.0, help="seconds between bytes")
    parser.add_argument(
        "--cases", default="answer,sleep,trickle", help="answer: a prompt server (start-up cost)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args()
    older = os.environ.get("PSIRAG_SRC")
    src = older or str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    env.pop("OPENAI_API_KEY", None)
    cases = args.cases.split(",")
    modes = {
        "answer": lambda body: Reply(content="Answer: Vesuvius"),
        "sleep": lambda body: Reply(content="Answer: late", delay=3600),
        "trickle": lambda body: Reply(content="Answer: " + "x" * 200, trickle=args.trickle),
    }
    servers = {case: FakeOpenAIServer(responder=modes[case]) for case in cases}
    results: dict[str, dict[str, object]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "corpus"
            corpus.mkdir()
            for name, text in CORPUS.items():
                (corpus / name).write_text(text, encoding="utf-8")
            psirag = [sys.executable, "-m", "psirag.cli"]

            def case(name: str) -> None:
                server = servers[name]
                index = Path(tmp) / f"index-{name}"
                spec = server.model_spec("m")
                build = [*psirag, "index", str(corpus), "--out", str(index), "-q"]
                subprocess.run(
                    [*build, "--embedder", spec],
                    env=env,
                    check=True,
                    timeout=120,
                    capture_output=True,
                )
                ask = [*psirag, "ask", str(index), "Which volcano destroyed Pompeii?", "-q"]
                ask += ["--llm", spec, *shlex.split(args.extra)]
                if "--timeout" in args.extra:  # the new CLI: the index's endpoint is confirmed
                    ask += ["--embedder", spec]
                seconds, code, last = _run(ask, env, args.cap)
                chats = sum(r.path.endswith("/chat/completions") for r in server.requests)
                results[name] = {
                    "seconds": round(seconds, 1),
                    "exit": code if code is not None else f"killed after {args.cap:g} s",
                    "chat_requests": chats,
                    "stderr": last,
                }

            threads = [threading.Thread(target=case, args=(n,)) for n in cases]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        for server in servers.values():
            server.close()
    # The code under test by name, not by this machine's path.
    label = "PSIRAG_SRC (an older checkout)" if older else "this checkout"
    report = {"extra": args.extra, "src": label, "results": results}
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
