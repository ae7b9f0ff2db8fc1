"""Shared by the runner tests: the outcome of a command spawned directly."""

from __future__ import annotations

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
