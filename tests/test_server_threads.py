"""The serving commands run BLAS on one thread (``psirag.server.blas``): ``psirag serve``,
each worker of ``--workers N`` (after the fork) and ``psirag mcp``'s index load. Each test
sets BLAS to two threads first, so it fails wherever the command leaves the setting alone,
and restores the process's own setting after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("threadpoolctl")

import threadpoolctl
from support import HashEmbedder, build_index

from psirag.cli import build_parser


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def two_blas_threads() -> Iterator[None]:
    """BLAS at two threads for the test (restored after, whatever the test changed)."""
    with threadpoolctl.threadpool_limits(limits=None):  # restores the setting on exit
        threadpoolctl.threadpool_limits(limits=2, user_api="blas")
        threads = _blas_threads()
        if not threads or min(threads) < 2:
            pytest.skip(f"no BLAS library here runs two threads ({threads})")
        yield


def test_limit_blas_threads_sets_one(two_blas_threads: None) -> None:
    from psirag.server.blas import limit_blas_threads

    assert limit_blas_threads() is True
    assert set(_blas_threads()) == {1}


def test_serve_runs_blas_on_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_blas_threads: None
) -> None:
    import uvicorn

    folder = tmp_path / "index"
    build_index(folder)
    seen: list[list[int]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: seen.append(_blas_threads()))
    from psirag.cli.serve import run_serve

    args = build_parser().parse_args(["serve", str(folder), "--port", "0", "--no-mcp"])
    assert run_serve(args, embedder=HashEmbedder()) == 0
    assert seen == [[1] * len(seen[0])], seen


def test_each_worker_runs_blas_on_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_blas_threads: None
) -> None:
    """``--workers 2``: the limit is set in the worker (``make_app``, after the fork), since
    the parent only supervises."""
    from psirag.server import app as app_module
    from psirag.server import workers as workers_module

    folder = tmp_path / "index"
    build_index(folder)
    apps: list[list[int]] = []

    def fake_create_app(*args: Any, **kwargs: Any) -> str:
        kwargs["jobs"].close()
        apps.append(_blas_threads())
        return "app"

    def fake_serve_workers(n: int, make_app: Any, sock: Any, jobs: Any, **_: Any) -> int:
        sock.close()
        assert _blas_threads() != [1] * len(_blas_threads())  # not set in the parent
        assert make_app(0) == "app"
        return 0

    monkeypatch.setattr(app_module, "create_app", fake_create_app)
    monkeypatch.setattr(workers_module, "serve_workers", fake_serve_workers)
    from psirag.cli.serve import run_serve

    args = build_parser().parse_args(
        ["serve", str(folder), "--port", "0", "--workers", "2", "--no-mcp"]
    )
    assert run_serve(args, embedder=HashEmbedder()) == 0
    assert len(apps) == 1 and set(apps[0]) == {1}, apps


def test_mcp_loads_its_index_with_blas_on_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_blas_threads: None
) -> None:
    from psirag.server import mcp_tools

    folder = tmp_path / "index"
    build_index(folder)
    seen: list[list[int]] = []

    class FakeServer:
        def __init__(self, state: Any) -> None:
            self.state = state

        def run(self) -> None:
            loaded = self.state.result(timeout=60)
            seen.append(_blas_threads())
            loaded.holder.get().index.embedder.close()

    monkeypatch.setattr(mcp_tools, "build_mcp_server", FakeServer)
    from psirag.cli.serve import run_mcp

    args = build_parser().parse_args(["mcp", str(folder)])
    assert run_mcp(args, embedder=HashEmbedder()) == 0
    assert len(seen) == 1 and set(seen[0]) == {1}, seen
