"""Shared by the runner tests: the outcome of a command spawned directly, and
the interpreter a test may run as nobody."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def nobody_python() -> str | None:
    """An interpreter with this project installed that nobody can run, when the
    test command made one (``DSH_NOBODY_PYTHON``, set by tests/run.sh as root)."""
    return os.environ.get("DSH_NOBODY_PYTHON") or None
