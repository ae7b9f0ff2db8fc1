"""Reading what a child printed on its terminal (a pty), to the end."""

from __future__ import annotations

import os
import time

from tests.support.wait import readable


def read_terminal(fd: int, deadline: float, answer: bytes | None = None) -> bytes:
    """Everything the child prints on ``fd`` until it closes its terminal;
    ``answer`` is written once, when the approval prompt appears.  A child still
    printing at ``deadline`` (``time.monotonic()``) fails the test."""
    seen = b""
    answered = answer is None
    while time.monotonic() < deadline:
        if not readable(fd, 1.0):
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed its terminal
            return seen
        if not chunk:
            return seen
        seen += chunk
        if not answered and b"[N]o (default" in seen:
            assert answer is not None
            os.write(fd, answer)
            answered = True
    raise AssertionError(f"the run did not finish; it printed: {seen!r}")
