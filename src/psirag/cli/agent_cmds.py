"""``psirag ask``, ``chat``, ``hops`` and ``summarize``: the agent, the multi-turn chat, the
query-hop discriminator and summarization mode from the shell.

``register(subparsers)`` adds the commands to the main CLI; each sets ``func`` (``args.func(args)``
runs it and returns the exit status). Steps stream to stderr as they happen, so stdout holds only
the answer (or, with ``--json``, the result document) and can be piped.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from psirag.agent.loop import MAX_ANSWER_CHARS, RetrieveAndAnswer, Step
from psirag.agent.summarize import DEFAULT_QUERY, Summarizer
from psirag.cli.common import answer_llm, llm_spec, load_query_index
from psirag.cli.options import (
    LLM_ENV,
    add_answer_check_option,
    add_http_options,
    add_index_argument,
    add_llm_options,
    add_max_retrievals_option,
    add_names_check_option,
    add_profile_option,
    add_query_embedder_option,
    positive_int,
    profile_from,
    text,
)
from psirag.errors import InputError
from psirag.hops import AUTO

if TYPE_CHECKING:
    from psirag.index import Index
    from psirag.llm import LLMClient


_LLM_HELP = (
    "LLM spec: openai:<base_url>#<model> (e.g. openai:http://127.0.0.1:8080/v1#qwen), "
    f"llamacpp:<path.gguf>, local or smollm2 (default: ${LLM_ENV})"
)
_SNIPPET = 100


def _step_arguments(p: Any) -> None:
    """How much of the agent's steps ``ask`` and ``chat`` show on stderr."""
    p.add_argument(
        "--trace", action="store_true", help="also show passages and raw replies on stderr"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="show no steps on stderr")


def register(subparsers: Any) -> None:
    """Add ``ask``, ``chat``, ``hops`` and ``summarize`` to the main CLI's subparsers."""
    ask = subparsers.add_parser(
        "ask",
        help="answer a question with the retrieve-and-answer agent",
        description="Answer a question from an index: retrieve, let the LLM read, retrieve again "
        "with the sub-question it asks (up to --max-retrievals times), answer. Steps are shown "
        "on stderr as they happen; the answer goes to stdout.",
    )
    add_index_argument(ask)
    ask.add_argument("question", type=text, help="the question to answer")
    _agent_arguments(ask)
    ask.add_argument("--json", action="store_true", help="print the full result as JSON")
    _step_arguments(ask)
    ask.set_defaults(func=run_ask)

    chat = subparsers.add_parser(
        "chat",
        help="a multi-turn conversation with the agent over an index",
        description="Read questions from stdin, one a line (an empty line is skipped, 'exit' "
        "ends). A follow-up question is first rewritten by the LLM into one that stands alone, "
        "using the earlier turns, then the agent answers it. Answers and their citations go to "
        "stdout; with --json, one JSON object a line.",
    )
    add_index_argument(chat)
    _agent_arguments(chat)
    chat.add_argument("--json", action="store_true", help="one JSON object a turn on stdout")
    _step_arguments(chat)
    chat.set_defaults(func=run_chat)

    hops = subparsers.add_parser(
        "hops",
        help="predict how many hops (1-4) each question needs",
        description="The query-hop discriminator (paper App. E.2) shipped with psirag: three "
        "yes/no steps (more than 1 hop? 2? 3?), each a logistic regression over the MiniLM "
        "question embedding and question-structure counts. "
        "--max-retrievals auto gives a question of h hops h-1 retrievals after the first, "
        "at least 1.",
    )
    hops.add_argument("questions", nargs="+", type=text, metavar="QUESTION")
    hops.add_argument("--json", action="store_true", help="a JSON list of {question, hops}")
    hops.set_defaults(func=run_hops)

    summ = subparsers.add_parser(
        "summarize",
        help="summarize an indexed document from its abstract tree",
        description="Summarize from one tree retrieval: the visited abstracts and passages "
        "most similar to the query, given to the LLM in document order.",
    )
    add_index_argument(summ)
    summ.add_argument("--doc", metavar="ID", help="document to summarize (one tree per document)")
    summ.add_argument(
        "--query",
        type=text,
        default=DEFAULT_QUERY,
        help=f"summative request (default: {DEFAULT_QUERY!r})",
    )
    _llm_arguments(summ)
    summ.add_argument(
        "--top-k",
        type=positive_int,
        default=20,
        metavar="K",
        help="nodes given to the LLM (default 20, QMSum; WCEP: 15)",
    )
    summ.add_argument(
        "--max-tokens",
        type=positive_int,
        default=200,
        metavar="N",
        help="cap on the summary (default 200, QMSum; WCEP: 150)",
    )
    summ.add_argument("--json", action="store_true", help="print the result as JSON")
    summ.set_defaults(func=run_summarize)


def _agent_arguments(parser: argparse.ArgumentParser) -> None:
    """The LLM and agent options ``ask`` and ``chat`` share."""
    ask = parser
    _llm_arguments(ask)
    add_max_retrievals_option(
        ask,
        default=1,
        help="retrievals allowed after the first one (default 1, the paper's 2Wiki/HotpotQA "
        "setting; MuSiQue: 3); auto: from the question's predicted hop count h (psirag hops), "
        "h-1 and at least 1",
    )
    ask.add_argument(
        "--max-tokens",
        type=positive_int,
        default=256,
        metavar="N",
        help="cap on each reply (default 256)",
    )
    ask.add_argument(
        "--max-answer-chars",
        type=positive_int,
        default=MAX_ANSWER_CHARS,
        metavar="N",
        help=f"longest answer accepted (default {MAX_ANSWER_CHARS} characters); a longer one "
        "counts as no answer",
    )
    add_answer_check_option(
        ask,
        help="take an answer found in no document as it is (the paper's loop); by default the "
        "model is asked once to look it up while a retrieval is left",
    )
    add_names_check_option(
        ask,
        help="an answer whose reasoning names people or works that no retrieved document is "
        "about, while a retrieval is left: retrieve them and answer again (lookup, default), "
        "ask the model whether it needs them (ask), or take the answer (off)",
    )
    add_profile_option(ask)


def _llm_arguments(parser: argparse.ArgumentParser) -> None:
    add_llm_options(parser, help=_LLM_HELP)
    add_query_embedder_option(parser)
    add_http_options(parser)


def _load_index(args: argparse.Namespace) -> Index:
    return load_query_index(args)


def _client(args: argparse.Namespace) -> LLMClient:
    spec = llm_spec(args)
    if not spec:
        raise InputError(f"no LLM given: pass --llm SPEC or set ${LLM_ENV}; {_LLM_HELP}")
    return answer_llm(args, spec)


def _one_line(text: str, limit: int = _SNIPPET) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_FOLLOW_UP_WHY = {  # why the model was asked again (a names lookup asks nothing)
    "nudge": "gave up with a retrieval left",
    "answer_check": "the answer is in no document",
    "names_check": "no document is about",
}


class _StepPrinter:
    """Streams an episode to stderr: each retrieval, then the thought and the decision."""

    def __init__(self, out: TextIO, trace: bool) -> None:
        self.out = out
        self.trace = trace
        self.count = 0

    def retrieved(self, step: Step) -> None:
        self.count += 1
        print(f"[{self.count}] search: {step.query}", file=self.out)
        print(f"    {len(step.passages)} passages", file=self.out)
        if self.trace:
            for p in step.passages:
                title = p.source.title or p.source.document
                print(f"      {p.score:.4f}  {title}: {_one_line(p.text, 70)}", file=self.out)
        self.out.flush()

    def replied(self, step: Step) -> None:
        if step.thought:
            print(f"    thought: {_one_line(step.thought, 300)}", file=self.out)
        if not step.well_formed:
            print("    (reply not in the expected format)", file=self.out)
        for repeated in step.repeated:
            print(f"    (not searched again: {_one_line(repeated)})", file=self.out)
        if step.follow_up == "names_lookup":
            names = ", ".join(step.follow_up_names)
            print(f"    → look up {names} (no document was about it yet)", file=self.out)
        else:
            if step.follow_up is not None:
                why = _FOLLOW_UP_WHY[step.follow_up]
                if step.follow_up_names:
                    why += ": " + ", ".join(step.follow_up_names)
                print(f"    (asked again: {why})", file=self.out)
            if step.action == "retrieve":
                print("    → retrieve again", file=self.out)
            elif step.action == "no_answer":
                print("    → no valid answer (the model gave none it could use)", file=self.out)
            else:
                forced = " (forced)" if step.action == "forced_answer" else ""
                print(f"    → answer{forced}", file=self.out)
        if self.trace:
            print("    raw reply:", file=self.out)
            for line in step.raw.splitlines() or [""]:
                print(f"      | {line}", file=self.out)
            if step.follow_up_raw is not None:
                print("    reply to the follow-up turn:", file=self.out)
                for line in step.follow_up_raw.splitlines() or [""]:
                    print(f"      | {line}", file=self.out)
            if step.forced_raw is not None:
                print("    reply to the forced-answer turn:", file=self.out)
                for line in step.forced_raw.splitlines() or [""]:
                    print(f"      | {line}", file=self.out)
        self.out.flush()


def _agent_factory(args: argparse.Namespace, index: Any, llm: Any) -> Any:
    """``question -> RetrieveAndAnswer`` with the command's settings; with
    ``--max-retrievals auto`` the budget comes from the question's predicted hops."""
    predictor = None
    config = profile_from(args)

    def search(query: str, k: int | None = None) -> Any:
        return index.search(query, k, config=config)

    if args.max_retrievals == AUTO:
        from psirag.hops import HopPredictor

        predictor = HopPredictor()

    def make(question: str) -> RetrieveAndAnswer:
        budget = (
            predictor.max_retrievals(question) if predictor is not None else args.max_retrievals
        )
        return RetrieveAndAnswer(
            llm,
            search,
            max_retrievals=budget,
            max_tokens=args.max_tokens,
            max_answer_chars=args.max_answer_chars,
            check_answers=args.answer_check,
            names_check=args.names_check,
        )

    return make


def print_citations(citations: Any, out: TextIO) -> None:
    """Each cited passage with where it comes from: label, document, chunk, span, passage id."""
    if not citations:
        return
    print("Sources:", file=out)
    for c in citations:
        src = c.passage.source
        title = f" ({src.title})" if src.title and src.title != src.document else ""
        print(
            f"  [{c.label}] {src.document}{title}, chunk {src.chunk}, chars {src.start}-{src.end}"
            f"  id {c.passage.id}",
            file=out,
        )


def run_ask(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    if args.max_retrievals != AUTO and args.max_retrievals < 0:
        raise InputError("--max-retrievals must be 0 or more")
    index = _load_index(args)
    printer = _StepPrinter(sys.stderr, args.trace)
    with _client(args) as llm:
        agent = _agent_factory(args, index, llm)(args.question)
        if args.max_retrievals == AUTO and not args.quiet:
            print(f"(auto: {agent.max_retrievals} retrievals after the first)", file=sys.stderr)
        result = agent.run(
            args.question,
            on_step=None if args.quiet else printer.replied,
            on_retrieval=None if args.quiet else printer.retrieved,
        )
        usage = llm.usage
    if args.json:
        document = result.to_dict()
        document["llm_usage"] = usage
        document["max_retrievals"] = agent.max_retrievals
        json.dump(document, stdout, ensure_ascii=False, indent=2)
        stdout.write("\n")
    else:
        print(result.answer, file=stdout)
        print_citations(result.citations, stdout)
    return 0


_CHAT_EXIT = frozenset({"exit", "quit", ":q", "/exit", "/quit"})


def run_chat(
    args: argparse.Namespace, *, stdout: TextIO | None = None, stdin: TextIO | None = None
) -> int:
    """One turn per stdin line; works piped (a prompt is shown only on a terminal)."""
    from psirag.agent.conversation import Conversation

    stdout = stdout or sys.stdout
    stdin = stdin or sys.stdin
    index = _load_index(args)
    printer = _StepPrinter(sys.stderr, args.trace)
    interactive = stdin.isatty() and not args.json
    with _client(args) as llm:
        chat = Conversation(llm, _agent_factory(args, index, llm))
        while True:
            if interactive:
                print("you> ", end="", file=sys.stderr, flush=True)
            line = stdin.readline()
            if not line:
                break
            asked = line.strip()
            if not asked:
                continue
            if asked.lower() in _CHAT_EXIT:
                break
            turn = chat.ask(
                asked,
                on_step=None if args.quiet else printer.replied,
                on_retrieval=None if args.quiet else printer.retrieved,
            )
            if turn.rewritten and not args.quiet:
                print(f"(read as: {turn.question})", file=sys.stderr)
            if args.json:
                stdout.write(json.dumps(turn.to_dict(), ensure_ascii=False) + "\n")
            else:
                print(turn.result.answer, file=stdout)
                print_citations(turn.result.citations, stdout)
            stdout.flush()
    return 0


def run_hops(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.hops import HopPredictor

    stdout = stdout or sys.stdout
    predicted = HopPredictor().predict(args.questions)
    if args.json:
        rows = [{"question": q, "hops": h} for q, h in zip(args.questions, predicted, strict=True)]
        json.dump(rows, stdout, ensure_ascii=False, indent=2)
        stdout.write("\n")
    else:
        for q, h in zip(args.questions, predicted, strict=True):
            print(f"{h}\t{q}", file=stdout)
    return 0


def run_summarize(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    index = _load_index(args)

    def visit(query: str) -> Any:
        # Algorithm 2's k and beam are the summary's top-k (paper C.2), as in `psirag eval`.
        docs = [args.doc] if args.doc else None
        return index.visit(query, docs=docs, beam=args.top_k, k=args.top_k)

    with _client(args) as llm:
        result = Summarizer(llm, visit, top_k=args.top_k, max_tokens=args.max_tokens).run(
            args.query
        )
    if args.json:
        document = result.to_dict()
        if args.doc is not None:
            document["doc"] = args.doc
        json.dump(document, stdout, ensure_ascii=False, indent=2)
        stdout.write("\n")
    else:
        print(result.answer, file=stdout)
    return 0


__all__ = [
    "LLM_ENV",
    "print_citations",
    "register",
    "run_ask",
    "run_chat",
    "run_hops",
    "run_summarize",
]
