"""Termination signals become an exception, so nothing outlives the CLI.

By default SIGTERM and SIGHUP end Python at once: no ``finally`` runs, so the
command's process group on the host, the process a ``docker exec`` started in
the session's container and the envd process of an E2B sandbox keep running
(and the container or sandbox with them) after ``dsh-sandbox`` is gone.

``stop_on_signals`` turns the first SIGTERM, SIGHUP or SIGINT into
``Stopped``, raised in the main thread wherever it is, like
``KeyboardInterrupt``: the code in flight unwinds through its ``finally``
blocks (the execution is killed, the context torn down, which stops the
container exec or the E2B sandbox) and ``main`` exits 128+N, as a shell
reports a command killed by signal N.  A second signal while that teardown
runs is recorded, not raised: interrupting the teardown is what would leak.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from dsh.executors import interrupts

#: What ``signal.getsignal`` returns (a callable, SIG_DFL/SIG_IGN, or None).
Handler = Callable[[int, FrameType | None], Any] | int | None

#: The signals a terminal, a supervisor or ``timeout(1)`` uses to stop a program.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Stopped(BaseException):
    """The CLI was asked to stop by signal ``signum``.

    A ``BaseException`` (as ``KeyboardInterrupt``) so an ``except Exception``
    on the way does not swallow it."""

    def __init__(self, signum: int) -> None:
        verb = "interrupted" if signum == signal.SIGINT else "stopped"
        super().__init__(f"{verb} by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class _Latch:
    """Raise on the first signal only; later ones are remembered."""

    def __init__(self) -> None:
        self.first: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.first is not None:
            return  # teardown of the first one is running: let it finish
        self.first = signum
        # Not while a spawned process is being recorded: it would be lost.
        interrupts.raise_or_defer(Stopped(signum))


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP/SIGINT raise ``Stopped`` (once).

    Signals the caller ignores (``nohup`` sets SIGHUP to ignored) stay
    ignored.  Only the main thread may install handlers; elsewhere (an
    embedding program's worker thread) the block runs unchanged."""
    latch = _Latch()
    previous: dict[int, Handler] = {}
    try:
        for signum in STOP_SIGNALS:
            old = signal.getsignal(signum)
            if old is signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, latch)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
