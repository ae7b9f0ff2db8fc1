"""The per-process pump thread of the subprocess service.

One thread per process selects over stdout, stderr, stdin (written
non-blocking, so neither 0 bytes nor many MiB can deadlock against a command
that writes while we write), the process's exit fd (a pidfd for local
processes, or its portable stand-in) and a wake fd (see ``portable``).  The same loop fires the execution deadline and
the SIGTERM->SIGKILL escalation, so no timer threads are needed.
"""

from __future__ import annotations

import abc
import os
import selectors
import signal
import threading
import time
from collections.abc import Callable

from dsh.executors.capture import StreamCapture
from dsh.executors.portable import Wake
from dsh.sandbox.runner import ExitStatus
from dsh.sandbox.stdin_feed import StdinFeed

_READ_SIZE = 1 << 16  # a pipe holds 64 KiB: a bigger read only allocates (and fragments) more
_STDIN_CHUNK = 1 << 16
#: After the leader exits and its group is SIGKILLed, the pipes hit EOF almost
#: at once; only a process that escaped the group (setsid) can hold them open.
_DRAIN_AFTER_EXIT_S = 2.0
_REMOTE_POLL_S = 0.05


class ProcessTarget(abc.ABC):
    """What the pump drives: a local child or a remote process."""

    pid: int | None
    exit_fd: int | None  # readable once the process exited (local: pidfd)

    @abc.abstractmethod
    def signal_tree(self, sig: int, *, snapshot: bool = False) -> None:
        """Signal everything the command started.  ``snapshot``: this is a
        kill, so also find descendants that left the process group."""

    @abc.abstractmethod
    def leader_status(self) -> ExitStatus | None:
        """Exit status if the command ended (non-blocking), else None."""

    @abc.abstractmethod
    def wait_exit(self, timeout: float) -> ExitStatus | None: ...

    @abc.abstractmethod
    def finish(self) -> None:
        """Reap, release and run the launch's cleanup (after the pump is done)."""

    def command_status(self, status: ExitStatus, stderr: Callable[[], bytes]) -> ExitStatus:
        """The command's own status from the process's (a wrapper may report
        that it could not start the command); called once, before ``finish``.
        ``stderr()`` gives the retained stderr, only when a wrapper asks."""
        return status


class Pump:
    """Collects one process's output until it ends, then settles it."""

    def __init__(
        self,
        target: ProcessTarget,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None,
        stdin: bytes | StdinFeed | None,
        captures: tuple[StreamCapture, StreamCapture],
        grace_s: float,
        deadline: float | None,
        on_deadline: Callable[[], None] | None,
        on_exit: Callable[[Pump], None],
        merge: bool = False,
    ) -> None:
        self.target = target
        self.pid = target.pid
        self.grace_s = grace_s
        self.captures = captures
        self.status: ExitStatus | None = None
        self.error: BaseException | None = None
        # Merged: what arrives on stderr goes to the stdout capture, in arrival order.
        self._fds = {stdout_fd: captures[0], stderr_fd: captures[0 if merge else 1]}
        self._merge = merge
        self._stdin_fd = stdin_fd
        # A feed streams stdin in bounded memory; bytes are written once.
        self._feed = stdin if isinstance(stdin, StdinFeed) else None
        self._stdin = memoryview(stdin if isinstance(stdin, bytes) else b"")
        self._deadline = deadline
        self._on_deadline = on_deadline
        self._on_exit = on_exit
        self._wake: Wake | None = Wake()
        self._lock = threading.Lock()
        self._escalate_at: float | None = None
        self._terminated = False
        self._exited = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dsh-pump-{self.pid}", daemon=True)
        if self._feed is not None:
            self._feed.on_data(self._poke)

    def start(self) -> None:
        """Start the thread that watches the process; if it cannot start (the
        user's limit on threads), the process is killed and reaped here, as
        nothing would read its output or see it end."""
        try:
            self._thread.start()
        except BaseException:
            self.target.signal_tree(signal.SIGKILL)
            self.target.finish()
            self._close_fds()
            raise

    # -- control (any thread) -------------------------------------------------------
    def terminate(self) -> bool:
        """SIGTERM the tree now and SIGKILL it after the grace period.

        False if the process already ended (or was already being terminated).
        """
        with self._lock:
            if self._exited or self._terminated:
                return False
            self._terminated = True
            self._escalate_at = time.monotonic() + self.grace_s
        self.target.signal_tree(signal.SIGTERM, snapshot=True)
        self._poke()
        return True

    def force_kill(self) -> None:
        with self._lock:
            if self._exited:
                return
            self._escalate_at = time.monotonic()
        self._poke()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _poke(self) -> None:
        with self._lock:
            if self._wake is None:
                return  # the pump already finished
            self._wake.poke()

    # -- the loop ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # settle anyway: a waiter must never hang
            self.error = exc
            self.target.signal_tree(signal.SIGKILL, snapshot=True)
        finally:
            self._close_fds()
            if self.status is not None:
                try:
                    stderr = self.captures[0 if self._merge else 1]
                    self.status = self.target.command_status(self.status, lambda: stderr.read_from(0)[1])
                except Exception as exc:
                    self.error = self.error or exc
            try:
                self.target.finish()
            except BaseException as exc:
                self.error = self.error or exc
            for capture in self.captures:
                capture.finish()
            if self.status is None:
                self.status = ExitStatus(exit_code=None, signal=int(signal.SIGKILL))
            try:
                self._on_exit(self)
            finally:
                with self._lock:
                    if self._wake is not None:
                        self._wake.close()
                    self._wake = None
                self._done.set()

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            for fd in self._fds:
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            assert self._wake is not None
            wake = self._wake
            sel.register(wake.fd, selectors.EVENT_READ)
            exit_fd = self.target.exit_fd
            if exit_fd is not None:
                sel.register(exit_fd, selectors.EVENT_READ)
            if self._stdin_fd is not None:
                if self._feed is not None:
                    os.set_blocking(self._stdin_fd, False)
                    self._watch_feed(sel)
                elif len(self._stdin):
                    os.set_blocking(self._stdin_fd, False)
                    sel.register(self._stdin_fd, selectors.EVENT_WRITE)
                else:
                    self._close_stdin()  # 0 bytes: EOF at once
            drain_until: float | None = None
            next_remote_poll = 0.0
            while True:
                now = time.monotonic()
                if self.status is not None and (not self._fds or drain_until is None or now >= drain_until):
                    return
                if self.status is None and exit_fd is None and not self._fds:
                    self._set_exited(self.target.wait_exit(self._remote_slice(now)))
                    if self.status is None:
                        self._check_timers(time.monotonic())
                    continue
                wait_s = self._timeout(now, drain_until, remote=exit_fd is None)
                if exit_fd is None and self.status is None:  # the remote leader is polled
                    wait_s = _REMOTE_POLL_S * 2 if wait_s is None else min(wait_s, _REMOTE_POLL_S * 2)
                events = sel.select(wait_s)
                for key, _mask in events:
                    fd = int(key.fd)
                    if fd in self._fds:
                        self._read(sel, fd)
                    elif fd == wake.fd:
                        wake.drain()
                        self._watch_feed(sel)
                    elif fd == exit_fd:
                        sel.unregister(fd)
                        exit_fd = None
                        self._leader_exited(sel)
                        drain_until = time.monotonic() + _DRAIN_AFTER_EXIT_S
                    elif fd == self._stdin_fd:
                        self._write_stdin(sel)
                if self.status is None:
                    self._check_timers(time.monotonic())
                if self.status is None and exit_fd is None and self._fds:
                    now = time.monotonic()
                    if now >= next_remote_poll:
                        # A remote leader that exited while what it left behind
                        # still holds the output: end it as a local exit would
                        # (after the timers: a deadline that passed still counts).
                        next_remote_poll = now + _REMOTE_POLL_S * 2
                        if self.target.leader_status() is not None:
                            self._leader_exited(sel)
                            drain_until = time.monotonic() + _DRAIN_AFTER_EXIT_S
        finally:
            sel.close()

    def _remote_slice(self, now: float) -> float:
        limit = self._timeout(now, None, remote=True)
        return _REMOTE_POLL_S if limit is None else min(limit, _REMOTE_POLL_S)

    def _timeout(self, now: float, drain_until: float | None, *, remote: bool) -> float | None:
        times = [t for t in (self._deadline, self._escalate_at, drain_until) if t is not None]
        if not times:
            return _REMOTE_POLL_S * 10 if remote else None
        return max(0.0, min(times) - now)

    def _check_timers(self, now: float) -> None:
        if self._deadline is not None and now >= self._deadline:
            self._deadline = None
            if self._on_deadline is not None:
                self._on_deadline()
        with self._lock:
            escalate = self._escalate_at is not None and now >= self._escalate_at
            if escalate:
                self._escalate_at = None
        if escalate:
            self.target.signal_tree(signal.SIGKILL, snapshot=True)

    def _leader_exited(self, sel: selectors.BaseSelector) -> None:
        status = self.target.leader_status()
        if status is None:  # spurious wake-up; cannot happen with an exit fd
            status = ExitStatus(exit_code=None, signal=int(signal.SIGKILL))
        self._set_exited(status)
        # Leftovers in the group (background jobs, double-forked daemons,
        # SIGTERM-ignorers) die with the command: nothing outlives it.
        self.target.signal_tree(signal.SIGKILL)
        self._close_stdin(sel)

    def _set_exited(self, status: ExitStatus | None) -> None:
        if status is None:
            return
        with self._lock:
            self._exited = True
            self._escalate_at = None
        self.status = status

    def _read(self, sel: selectors.BaseSelector, fd: int) -> None:
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._fds[fd].feed(data)
            return
        sel.unregister(fd)
        os.close(fd)
        del self._fds[fd]

    def _watch_feed(self, sel: selectors.BaseSelector) -> None:
        """Wait for the command's stdin to be writable only while the feed has bytes."""
        feed = self._feed
        if feed is None or self._stdin_fd is None:
            return
        registered = self._stdin_fd in sel.get_map()
        if feed.pending() and not registered:
            sel.register(self._stdin_fd, selectors.EVENT_WRITE)
        elif not feed.pending():
            if registered:
                sel.unregister(self._stdin_fd)
            if feed.eof():
                self._close_stdin()

    def _write_feed(self, sel: selectors.BaseSelector) -> None:
        assert self._feed is not None and self._stdin_fd is not None
        data = self._feed.take(_STDIN_CHUNK)
        try:
            n = os.write(self._stdin_fd, data) if data else 0
        except BlockingIOError:
            n = 0
        except OSError:  # EPIPE: the command closed its stdin
            self._close_stdin(sel)
            return
        self._feed.unread(data[n:])
        self._watch_feed(sel)

    def _write_stdin(self, sel: selectors.BaseSelector) -> None:
        assert self._stdin_fd is not None
        if self._feed is not None:
            self._write_feed(sel)
            return
        try:
            n = os.write(self._stdin_fd, self._stdin[:_STDIN_CHUNK])
            self._stdin = self._stdin[n:]
            if len(self._stdin):
                return
        except BlockingIOError:
            return
        except OSError:
            pass  # EPIPE: the command closed its stdin; the rest is not wanted
        self._close_stdin(sel)

    def _close_stdin(self, sel: selectors.BaseSelector | None = None) -> None:
        if self._stdin_fd is None:
            return
        if sel is not None and self._stdin_fd in sel.get_map():
            sel.unregister(self._stdin_fd)
        os.close(self._stdin_fd)
        self._stdin_fd = None
        if self._feed is not None:
            self._feed.abandon()

    def _close_fds(self) -> None:
        for fd in list(self._fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        self._close_stdin()
