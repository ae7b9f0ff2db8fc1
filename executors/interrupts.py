"""Hold back an exception a signal handler raises while a process is being registered.

A program that turns SIGTERM into an exception (as the CLI does) can have it
raised anywhere in the main thread, including between ``fork`` and the moment
the new process is recorded in the subprocess service.  There, the exception
would lose the only handle on a running command: nothing would kill it at
teardown.  Handlers that cooperate call ``raise_or_defer``; inside a
``registering()`` block the exception is kept and raised when the block ends,
once the process can be found and killed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_main = threading.main_thread()
_depth = 0
_held: BaseException | None = None


@contextmanager
def registering() -> Iterator[None]:
    """Defer cooperating signal exceptions (main thread only: handlers run there)."""
    global _depth, _held
    if threading.current_thread() is not _main:
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _held is not None:
            held, _held = _held, None
            raise held


def raise_or_defer(exc: BaseException) -> None:
    """From a signal handler: raise ``exc`` now, or at the end of the
    ``registering()`` block the main thread is in."""
    global _held
    if _depth > 0:
        if _held is None:
            _held = exc
        return
    raise exc
