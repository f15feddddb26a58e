"""``psirag add|remove|sync --server URL``: send the write to a running ``psirag serve``, which
applies it to the index it holds in memory, instead of loading the index in this process.

Files are uploaded as they are (multipart ``POST /documents``): the server reads them with the
same loaders as a local ``psirag add``, so there is one parsing path. A sync reads the server's
sources (``GET /sources``), plans here as a local sync does, reads the new and changed files
with the same loaders and names, and sends them with the ids to remove (``POST /sync``), so
the server records each file's path and sha256 for the next sync. The command waits for the
server's job (``GET /jobs/{id}?wait=S``, long-polled) and prints the same summary as a local
update. Every failure (a bad URL, no server there, a wrong key, a refused file, a failed job)
is one line naming the server and what to do. The URL is always the user's: it is never read
from an index.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from psirag.cli.options import SERVER_KEY_ENV
from psirag.errors import InputError, PsiragError

POLL_START_S = 0.05
POLL_MAX_S = 1.0
"""The pauses between polls of a server that does not hold ``GET /jobs/{id}?wait=S``."""
JOB_WAIT_S = 30.0
"""How long each ``GET /jobs/{id}?wait=S`` asks the server to hold the answer."""
REQUEST_TIMEOUT_S = 60.0
"""One HTTP request's limit (over :data:`JOB_WAIT_S`; a job is waited for in many requests,
so a long add is not cut off)."""


class ServerCallError(PsiragError):
    """The psirag server could not be reached, refused the request, or its job failed."""


class ServerClient:
    """The few calls of the psirag server's documents API a CLI write needs (stdlib only)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(
                f"--server must be the psirag server's http:// or https:// URL "
                f"(as `psirag serve` prints it), got {url!r}"
            )
        self.url = url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get(SERVER_KEY_ENV, "")
        self._key = key
        if key and parts.scheme == "http":
            from psirag.http import warn_plain_http_key

            warn_plain_http_key(self.url, SERVER_KEY_ENV if api_key is None else "--api-key")

    def call(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> dict[str, Any]:
        """One request; the JSON answer, or :class:`ServerCallError` with the server's message."""
        headers = {"Accept": "application/json", "User-Agent": "psirag"}
        if content_type:
            headers["Content-Type"] = content_type
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        # a server on this machine is never reached through a proxy from the environment
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ServerCallError(self._refusal(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerCallError(
                f"cannot reach the psirag server at {self.url} ({reason}); check the URL and "
                "that `psirag serve` is running there"
            ) from None
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ServerCallError(
                f"{self.url}{path} did not answer with a JSON object; is it a psirag server?"
            )
        return answer

    def _refusal(self, exc: urllib.error.HTTPError) -> str:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError, OSError):
            message = exc.reason or "no message"
        hint = ""
        if exc.code in (401, 403):
            hint = f" (give the server's key with --api-key or ${SERVER_KEY_ENV})"
        return f"the psirag server at {self.url} answered {exc.code}: {message}{hint}"

    def upload(self, files: list[Path]) -> dict[str, Any]:
        """``POST /documents`` with every file as a multipart ``file`` field: one job."""
        boundary = f"psirag-{uuid.uuid4().hex}"
        parts: list[bytes] = []
        for f in files:
            name = f.name.replace('"', "_")
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
            )
            try:
                parts.append(f.read_bytes())
            except OSError as exc:
                raise InputError(f"{f}: cannot be read ({exc.strerror or exc}); check it") from exc
            parts.append(b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        return self.call(
            "POST", "/documents", b"".join(parts), f"multipart/form-data; boundary={boundary}"
        )

    def sources(self) -> dict[str, Any]:
        """``GET /sources``: ``sources`` (each file-read document's ``{"path", "sha256"}`` by
        document id), ``documents`` (how many in all), ``drift`` and ``saved_generation``."""
        got = self.call("GET", "/sources")
        listed = got.get("sources")
        if not isinstance(listed, dict) or not isinstance(got.get("documents"), int):
            raise ServerCallError(
                f"{self.url}/sources did not list the index's sources; is the server a psirag "
                "that supports sync --server?"
            )
        got["sources"] = {str(k): v for k, v in listed.items() if isinstance(v, dict)}
        return got

    def sync(self, remove: list[str], documents: list[dict[str, Any]]) -> dict[str, Any]:
        """``POST /sync``: remove and add in one server job."""
        body = json.dumps({"remove": remove, "documents": documents}, ensure_ascii=False)
        return self.call("POST", "/sync", body.encode("utf-8"), "application/json")

    def remove(self, doc_id: str) -> dict[str, Any]:
        return self.call("DELETE", f"/documents/{urllib.parse.quote(doc_id, safe='')}")

    def wait(self, job: dict[str, Any]) -> dict[str, Any]:
        """Wait for the job until it is done; :class:`ServerCallError` with its error if it
        failed. Each request long-polls (``GET /jobs/{id}?wait=S``: the server answers as soon
        as the job finishes); a server that answers an unfinished job at once (an older one,
        which ignores ``wait``) is polled instead, every :data:`POLL_START_S` doubling to
        :data:`POLL_MAX_S`. Bounded by the server: a job always ends (done or failed), and a
        server that stops answering ends the wait with an error."""
        path = f"/jobs/{urllib.parse.quote(str(job['id']), safe='')}?wait={JOB_WAIT_S:g}"
        pause = POLL_START_S
        while job.get("status") not in ("done", "failed"):
            asked = time.monotonic()
            job = self.call("GET", path)
            if job.get("status") in ("done", "failed"):
                break
            if time.monotonic() - asked < JOB_WAIT_S / 2:  # the server did not hold it
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
        if job["status"] == "failed":
            raise ServerCallError(
                f"the psirag server at {self.url} could not apply the change: {job.get('error')}"
            )
        return job

    def check_serves(self, index: str) -> str:
        """The folder the server serves; InputError when it is plainly not ``index``."""
        served = str(self.call("GET", "/index").get("index", ""))
        mine, theirs = Path(index), Path(served)
        comparable = theirs.is_absolute() and theirs.exists() and mine.exists()
        if comparable and not os.path.samefile(mine, theirs):
            raise InputError(
                f"the psirag server at {self.url} serves {served}, not {index}; give the "
                "URL of the server of this index"
            )
        return served


def files_under(paths: list[str]) -> list[Path]:
    """The files ``psirag add`` would read under ``paths`` (folders walked the same way)."""
    from psirag.ingest.loaders import SUFFIXES, _walk

    found: list[Path] = []
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise InputError(f"{p}: no such file or folder; check the path")
        for f in _walk(p)[0] if p.is_dir() else [p]:
            if f.suffix.lower() not in SUFFIXES:
                raise InputError(
                    f"{f}: unsupported file type {f.suffix!r} (psirag add reads "
                    f"{', '.join(SUFFIXES)})"
                )
            found.append(f)
    if not found:
        raise InputError(f"{', '.join(paths)} hold no supported files")
    return found


__all__ = ["ServerCallError", "ServerClient", "files_under"]
