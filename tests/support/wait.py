"""The one poll helper of the tests, and its bound.

A bound is for a stuck test, never a timing bet: up to eight test runs share
two cores, so it is generous, and a passing test never waits it out.
"""

from __future__ import annotations

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
