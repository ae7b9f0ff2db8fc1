"""The two wake-up fds of the process layer, on Linux and elsewhere (macOS).

- ``Wake``: poked from any thread to wake the pump's ``select``: an eventfd
  on Linux, else the read end of a non-blocking self-pipe.
- ``ExitWatch(pid)``: an fd readable once the child ``pid`` has exited, and
  its status: a pidfd on Linux, else a pipe closed by a thread blocked in
  ``waitid(WNOWAIT)`` (or ``waitpid`` where Python has no ``waitid``).

Which one is used is decided at each call, by whether ``os`` has the Linux
call, so hiding it (as tests do) selects the fallback.
"""

from __future__ import annotations

import os
import threading

from dsh.sandbox.runner import ExitStatus


class Wake:
    """A level-triggered wake-up fd; ``poke`` from any thread, ``drain`` in the loop."""

    def __init__(self) -> None:
        self._eventfd = hasattr(os, "eventfd")
        if self._eventfd:
            self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._write_fd = self.fd
        else:
            self.fd, self._write_fd = os.pipe()  # non-inheritable by default
            os.set_blocking(self.fd, False)
            os.set_blocking(self._write_fd, False)

    def poke(self) -> None:
        try:
            if self._eventfd:
                os.eventfd_write(self.fd, 1)
            else:
                os.write(self._write_fd, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the loop is already due to wake

    def drain(self) -> None:
        try:
            if self._eventfd:
                os.eventfd_read(self.fd)
            else:
                while os.read(self.fd, 4096):
                    pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)
        if self._write_fd != self.fd:
            os.close(self._write_fd)


class ExitWatch:
    """``fd`` turns readable once the child ``pid`` exits; ``status()`` says how.

    With ``waitid`` (Linux; macOS from Python 3.13) the child stays a zombie
    until the caller reaps it, so its pid and group id cannot be reused while
    the caller still signals the group.  Without it (macOS before 3.13) the
    watching thread has to reap it with ``waitpid``: from then until the
    caller's teardown, a new process could in principle get that group id.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._reaped: int | None = None  # waitpid status, when the thread reaped it
        if hasattr(os, "pidfd_open"):
            self.fd = os.pidfd_open(pid)
            return
        self.fd, write_fd = os.pipe()

        def watch() -> None:
            try:
                if hasattr(os, "waitid"):
                    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                else:
                    self._reaped = os.waitpid(pid, 0)[1]
            except ChildProcessError:
                pass  # already reaped: it has exited all the same
            finally:
                os.close(write_fd)  # EOF: readable

        threading.Thread(target=watch, name=f"dsh-exit-{pid}", daemon=True).start()

    def status(self) -> ExitStatus | None:
        """The exit status once it exited (the child is not reaped here)."""
        if self._reaped is not None:
            code = os.waitstatus_to_exitcode(self._reaped)
            return ExitStatus(exit_code=code) if code >= 0 else ExitStatus(exit_code=None, signal=-code)
        if not hasattr(os, "waitid"):
            return None
        info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return None
        if info.si_code == os.CLD_EXITED:
            return ExitStatus(exit_code=info.si_status)
        return ExitStatus(exit_code=None, signal=info.si_status)

    def close(self) -> None:
        os.close(self.fd)
