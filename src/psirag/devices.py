"""Where a local model runs: one setting that every embedder load reads.

Why one place: an embedder is loaded by the build, by ``add``/``sync``, by a search, by the
server's retriever and by Ray's workers, each through :func:`psirag.embed.load_embedder`. The
device is a property of the machine, not of the index (an index built on a GPU is searched on a
CPU with the same vectors), so it is never saved: it comes from ``--device`` (which sets
:data:`DEVICE_ENV` for the command's process and the processes it starts) or from that
variable, and is ``cpu`` when neither says otherwise. ONNX Runtime, the default MiniLM
backend, runs on the CPU; any other device runs the model with torch (``psirag[torch]``).
"""

from __future__ import annotations

import os
import re

from psirag.errors import InputError

DEVICE_ENV = "PSIRAG_DEVICE"
"""Environment variable naming the device when no ``device`` is passed (``--device`` sets it)."""

DEFAULT_DEVICE = "cpu"

DEVICE_FORMS = "cpu, cuda, cuda:N (a GPU's number) or mps"
"""What :func:`parse_device` accepts, in words for error messages and ``--help``."""

_DEVICE = re.compile(r"^(cpu|mps|cuda(:[0-9]{1,3})?)$")


def parse_device(value: str, source: str = "device") -> str:
    """``value`` as a torch device name (``cpu``, ``cuda``, ``cuda:1``, ``mps``), or an
    :class:`InputError` naming ``source`` (the option or variable it came from)."""
    name = value.strip().lower()
    if not _DEVICE.match(name):
        raise InputError(f"{source}: unknown device {value!r}; expected {DEVICE_FORMS}")
    return name


def default_device() -> str:
    """The device of :data:`DEVICE_ENV`, or ``cpu`` when it is unset or empty."""
    raw = os.environ.get(DEVICE_ENV, "")
    return parse_device(raw, DEVICE_ENV) if raw.strip() else DEFAULT_DEVICE


__all__ = ["DEFAULT_DEVICE", "DEVICE_ENV", "DEVICE_FORMS", "default_device", "parse_device"]
