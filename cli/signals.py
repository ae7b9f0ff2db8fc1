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

Not inside the ``threading`` module, though: its locks are taken and given
back by Python code (``Condition.__enter__``, ``_acquire_restore``), and an
exception between the two leaves a lock held that no ``with`` will release
(the thread that settles the command then blocks on it and the CLI hangs) or
releases one that was not taken.  There the signal is held and looked at
again by a short SIGALRM timer, and raised at the first point outside it.
"""

from __future__ import annotations

import signal
import threading
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


_THREADING_FILE = threading.__file__
#: How soon a signal that landed inside the threading module is looked at again.
RETRY_S = 0.005


class _Latch:
    """Raise on the first signal only; later ones are remembered."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.pending: int | None = None
        self.alarm_handler: Handler = None  # SIGALRM's own, while the retry timer is ours

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.first is not None:
            return  # teardown of the first one is running: let it finish
        if _inside_threading(frame):
            if self.pending is None:
                self.pending = signum
                self._arm()
            return
        self._raise(signum)

    def retry(self, _signum: int, frame: FrameType | None) -> None:
        """SIGALRM: the held signal, outside the threading module by now or later."""
        if self.pending is None or self.first is not None:
            return
        if _inside_threading(frame):
            self._arm()
            return
        signum, self.pending = self.pending, None
        self._raise(signum)

    def _arm(self) -> None:
        # A timer, not a thread: a new thread cannot be started from a handler
        # that interrupted the threading module, and raise_signal() would run
        # this handler again at once, still inside it.
        if self.alarm_handler is None:
            self.alarm_handler = signal.signal(signal.SIGALRM, self.retry)
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)

    def disarm(self) -> None:
        if self.alarm_handler is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.alarm_handler)
            self.alarm_handler = None

    def _raise(self, signum: int) -> None:
        self.first = signum
        # Not while a spawned process is being recorded: it would be lost.
        interrupts.raise_or_defer(Stopped(signum))


def _inside_threading(frame: FrameType | None) -> bool:
    """In the threading module's lock work, where an exception would break a lock.

    Except a thread waiting in ``Condition.wait`` on its waiter lock (every
    ``Event.wait``, ``Thread.join`` and ``Queue.get`` sleeps there): that call
    sits inside a try/finally that takes the lock back, so raising is safe,
    and a wait that lasts as long as the command must not hold the signal."""
    if frame is None or frame.f_code.co_filename != _THREADING_FILE:
        return False
    import linecache  # only when a signal lands in the threading module

    return "waiter.acquire(" not in linecache.getline(frame.f_code.co_filename, frame.f_lineno)


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
        latch.disarm()
        for number, old in previous.items():
            signal.signal(number, old)
