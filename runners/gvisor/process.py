"""One command as a ``runsc exec``, driven like a local process (``RemoteProcess``).

- Output: ``runsc exec`` hands its own stdout and stderr to the command inside
  the sandbox, so they are the write ends of two ``os.pipe()``s: the command
  writes straight into them and the executor reads the other ends.
- Stdin: written by its own thread (a large stdin cannot deadlock against
  unread output), then closed; a ``StdinFeed`` (the CLI's own stdin, streamed)
  is copied chunk by chunk as it arrives.
- Exit: ``runsc exec`` exits with the command's status; death by signal N
  shows as 128+N and is reported as ``signal=N`` only when this handle sent N
  (an ordinary ``exit 143`` stays an exit code).
- Kill: the tree killer of ``scripts.py`` in a second ``runsc exec``.  The
  same killer sweeps up once the command has exited, so nothing it started (a
  ``setsid`` daemon, a ``nohup`` job) outlives it.  When the killer cannot run,
  the whole sandbox is destroyed (the runner makes a new one).
- Wall time: a timer kills the tree when the policy's wall time is up; the
  status is then 124, as ``timeout(1)`` reports it on the local runners.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from dsh.runners.gvisor.scripts import KILLER
from dsh.sandbox.runner import ExitStatus, RemoteProcess
from dsh.sandbox.stdin_feed import StdinFeed

log = logging.getLogger(__name__)
WALL_TIME_STATUS = 124


class RunscExec(RemoteProcess):
    """A running ``runsc exec``; ``argv`` is the whole runsc command line."""

    def __init__(self, argv: Sequence[str], *, runsc: Sequence[str], sandbox_id: str, marker: str,
                 user: str, stdin: bytes | StdinFeed | None, wall_time_s: float | None,
                 on_unkillable: Callable[[], None], on_close: Callable[[], None]) -> None:
        self._runsc = tuple(runsc)
        self._sandbox_id = sandbox_id
        self.marker = marker
        self._user = user
        self._on_unkillable = on_unkillable
        self._on_close: Callable[[], None] | None = on_close
        self._sent: set[int] = set()
        self._status: ExitStatus | None = None
        self._lock = threading.Lock()
        self._timed_out = False
        self.stdout_fd, out_w = os.pipe()
        self.stderr_fd, err_w = os.pipe()
        try:
            feed = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
            self._proc = subprocess.Popen(list(argv), stdin=feed, stdout=out_w, stderr=err_w,
                                          start_new_session=True, close_fds=True)
        except BaseException:
            for fd in (self.stdout_fd, self.stderr_fd):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        self._stdin_feed = stdin if isinstance(stdin, StdinFeed) else None
        self._feeder: threading.Thread | None = None
        if stdin is not None:
            self._feeder = threading.Thread(target=self._feed, args=(stdin,), daemon=True)
            self._feeder.start()
        self._timer: threading.Timer | None = None
        if wall_time_s is not None:
            self._timer = threading.Timer(wall_time_s, self._wall_time_up)
            self._timer.daemon = True
            self._timer.start()

    def _feed(self, data: bytes | StdinFeed) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        try:
            if isinstance(data, StdinFeed):
                for chunk in data.chunks():
                    pipe.write(chunk)
                    pipe.flush()
            else:
                pipe.write(data)
        except OSError:
            if isinstance(data, StdinFeed):
                data.abandon()  # the writer must not block on a reader that left
            # else: the command exited without reading everything
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def _wall_time_up(self) -> None:
        if self._proc.poll() is None:
            self._timed_out = True
            self._signal_tree(signal.SIGKILL, attempts=5, escalate=True)

    # -- status --------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        if self._status is not None:
            return self._status
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        with self._lock:
            if self._status is None:
                if self._timer is not None:
                    self._timer.cancel()
                # The command exited: what it left running dies with it.
                self._signal_tree(signal.SIGKILL, attempts=2, escalate=False)
                self._status = self._decode(code)
            return self._status

    def _decode(self, code: int) -> ExitStatus:
        if self._timed_out:
            return ExitStatus(WALL_TIME_STATUS)
        if code < 0:  # runsc exec itself died by a signal
            return ExitStatus(None, -code)
        if code > 128 and code - 128 in self._sent:
            return ExitStatus(None, code - 128)
        return ExitStatus(code)

    # -- kill ----------------------------------------------------------------------
    def kill(self, sig: int) -> None:
        """Signal every process of this command inside the sandbox."""
        if self._status is not None:
            return
        self._sent.add(int(sig))
        self._signal_tree(sig, attempts=5, escalate=sig == signal.SIGKILL)

    def _signal_tree(self, sig: int, *, attempts: int, escalate: bool) -> None:
        argv = [*self._runsc, "exec", "-user", self._user, self._sandbox_id,
                "/bin/bash", "-c", KILLER, "dsh-kill", self.marker, str(int(sig))]
        for attempt in range(attempts):
            try:
                code = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, timeout=30, check=False).returncode
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("gvisor: kill exec failed (attempt %d): %s", attempt + 1, exc)
                code = None
            if code == 0:  # 1: SIGKILL left survivors; other codes: the exec did not start
                return
            time.sleep(0.1 * (attempt + 1))
        if escalate:
            # The killer cannot run or cannot finish: destroy the whole sandbox,
            # the only kill left.  The runner makes a fresh one for the next command.
            log.warning("gvisor: cannot kill command %s in place; destroying its sandbox", self.marker)
            self._on_unkillable()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._proc.poll() is None:
            self.kill(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10)
        if self._stdin_feed is not None:
            # A feeder waiting for input that will never come (a caller that
            # keeps the feed open) ends now, instead of holding close 10 s.
            self._stdin_feed.abandon()
        if self._feeder is not None:
            self._feeder.join(timeout=10)
        with self._lock:
            on_close, self._on_close = self._on_close, None
        if on_close is not None:  # once, however often close is called
            on_close()
