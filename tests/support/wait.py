"""The tests' waits on real signals (a condition, a line a command prints), and their bound.

A bound is for a stuck test, never a timing bet: up to eight test runs share
two cores, so it is generous, and a passing test never waits it out.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable

#: How long any test waits for something that should happen (a process to
#: start or die, output to arrive, a command to finish).
PATIENCE_S = 120.0


def wait_until(
    predicate: Callable[[], object],
    what: str | Callable[[], str] = "the condition",
    timeout: float = PATIENCE_S,
) -> None:
    """Poll ``predicate`` until it is true; fail naming ``what`` if it never is.

    ``what`` may be a callable, evaluated only on failure, to say what is left
    (the processes still running, the output so far).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}")
        time.sleep(0.02)


def await_line(fd: int, expected: bytes, what: str, timeout: float = PATIENCE_S) -> None:
    """Read ``fd`` up to the first newline and check it is ``expected``.

    A command prints a line once it is really in the state a test needs (started,
    listening, waiting for a marker); the test blocks on that line instead of
    guessing with a sleep.  It reads one byte at a time so nothing after the line
    is taken from the stream the test reads later.
    """
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not readable(fd, left):
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (read so far: {line!r})")
        byte = os.read(fd, 1)
        if not byte:
            raise AssertionError(f"the stream ended before {what} (read so far: {line!r})")
        line += byte
    assert line == expected + b"\n", f"expected {expected!r} as {what}, read {line!r}"


def readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` has something to read within ``timeout_s``.  poll, not
    select: after a long run this process holds fds above FD_SETSIZE, which
    select refuses."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout_s * 1000))))
