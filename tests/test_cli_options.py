"""The CLI's options are declared once (psirag.cli.options) and follow the config: choices are
the config's Literal values, serve's defaults are ServerSettings' and read back into it."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path
from typing import get_args

import pytest

from psirag.cli import build_parser
from psirag.cli.serve import SETTINGS_FLAGS, settings_from
from psirag.config import AbstractMode, ProfileName, RoutingMode
from psirag.server.settings import ServerSettings

SRC = Path(__file__).resolve().parents[1] / "src" / "psirag"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _option(p: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in p._actions if flag in a.option_strings), None)


def test_no_argparse_outside_the_cli_package() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "cli" not in path.relative_to(SRC).parts[:1]
        and re.search(r"^\s*(import argparse|from argparse)", path.read_text(), re.M)
    ]
    assert offenders == []


@pytest.mark.parametrize("flag", ['"--llm"', '"index"', '"--timeout"', '"--embedder"'])
def test_shared_options_are_spelled_out_once(flag: str) -> None:
    declared = re.compile(r"add_argument\(\s*" + re.escape(flag))
    where = sorted(
        str(path.relative_to(SRC))
        for path in (SRC / "cli").rglob("*.py")
        for _ in declared.finditer(path.read_text())
    )
    assert where == ["cli/options.py"] * (3 if flag == '"--embedder"' else 1)


def test_choices_are_the_config_literals() -> None:
    commands = _subparsers()
    for name in ("index", "eval"):
        abstracts = _option(commands[name], "--abstracts")
        routing = _option(commands[name], "--routing")
        assert abstracts is not None and tuple(abstracts.choices or ()) == get_args(AbstractMode)
        assert routing is not None and tuple(routing.choices or ()) == get_args(RoutingMode)
    for name in ("search", "ask", "chat", "eval"):
        profile = _option(commands[name], "--profile")
        assert profile is not None and tuple(profile.choices or ()) == get_args(ProfileName)


def test_every_index_command_takes_the_same_index_argument() -> None:
    commands = _subparsers()
    shapes = set()
    for name in ("search", "inspect", "add", "remove", "sync", "ask", "chat", "summarize"):
        action = next(a for a in commands[name]._actions if a.dest == "index")
        shapes.add((action.metavar, action.help, action.nargs))
    for name in ("serve", "mcp"):
        action = next(a for a in commands[name]._actions if a.dest == "index")
        shapes.add((action.metavar, action.help, action.nargs))
    assert shapes == {("DIR", "index folder (from psirag index)", None)}


def test_serve_options_follow_server_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PSIRAG_API_KEY", raising=False)
    serve = _subparsers()["serve"]
    names = {f.name for f in fields(ServerSettings)}
    for field_name, flag in SETTINGS_FLAGS.items():
        assert field_name in names
        action = _option(serve, flag.name)
        assert action is not None and action.dest == field_name
    defaults = settings_from(build_parser().parse_args(["serve", "DIR"]))
    assert defaults == ServerSettings()
    given = settings_from(
        build_parser().parse_args(
            [
                "serve",
                "DIR",
                "--port",
                "0",
                "--cors-origin",
                "a",
                "--cors-origin",
                "b",
                "--request-timeout",
                "2.5",
                "--max-body-bytes",
                "10",
                "--llm-concurrency",
                "2",
                "--max-query-chars",
                "7",
                "--max-retrievals",
                "auto",
                "--api-key",
                "k",
            ]
        )
    )
    assert given == ServerSettings(
        port=0,
        cors_origins=("a", "b"),
        request_timeout=2.5,
        max_body_bytes=10,
        llm_concurrency=2,
        max_query_chars=7,
        max_retrievals="auto",
        api_key="k",
    )
    help_text = serve.format_help()
    assert f"(default {ServerSettings.max_body_bytes:,})" in help_text
    assert f"(default {ServerSettings.request_timeout:g})" in help_text


def test_bad_values_stop_at_parsing(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["serve", "DIR", "--max-body-bytes", "0"],
        ["eval", "DATA", "--summary-top-k", "0"],
        ["ask", "DIR", "q", "--max-retrievals", "-1"],
        ["search", "DIR", "q", "--retries", "-1"],
    ):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 2
        assert "error: argument" in capsys.readouterr().err


def test_eval_options_follow_eval_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from psirag.cli import eval_cmd
    from psirag.eval.settings import EvalSettings

    evaluate = _subparsers()["eval"]
    names = {f.name for f in fields(EvalSettings)}
    for field_name, flag in eval_cmd.EVAL_FLAGS.items():
        assert field_name in names
        action = _option(evaluate, flag.name)
        assert action is not None and action.dest == field_name
    assert eval_cmd.settings_from(build_parser().parse_args(["eval", "D"]), None, None) == (
        EvalSettings()
    )
    args = build_parser().parse_args(
        [
            "eval",
            "D",
            "--methods",
            "bm25,psi",
            "--workers",
            "3",
            "--bootstrap",
            "0",
            "--summary-top-k",
            "15",
            "--retrieval-only",
            "--subcorpus",
            "9",
            "--beam",
            "4",
        ]
    )
    assert eval_cmd.settings_from(args, "local", None) == EvalSettings(
        methods=("bm25", "psi"),
        workers=3,
        bootstrap=0,
        summary_top_k=15,
        retrieval_only=True,
        subcorpus=9,
        beam=4,
        llm="local",
    )
