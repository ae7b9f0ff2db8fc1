"""The two wake-up fds of the process layer, on Linux and elsewhere (macOS).

- ``Wake``: poked from any thread to wake the pump's ``select``: an eventfd
  on Linux, else the read end of a non-blocking self-pipe.
- ``exit_fd(pid)``: readable once the child ``pid`` has exited (it stays a
  zombie, so its pid and group id cannot be reused): a pidfd on Linux, else a
  pipe written by a thread blocked in ``waitid(WNOWAIT)``.

Which one is used is decided at each call, by whether ``os`` has the Linux
call, so hiding it (as tests do) selects the fallback.
"""

from __future__ import annotations

import os
import threading


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


def exit_fd(pid: int) -> int:
    """An fd that becomes readable when the child ``pid`` exits; the caller closes it."""
    if hasattr(os, "pidfd_open"):
        return os.pidfd_open(pid)
    read_fd, write_fd = os.pipe()

    def watch() -> None:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass  # already reaped: it has exited all the same
        finally:
            os.close(write_fd)  # EOF: readable

    threading.Thread(target=watch, name=f"dsh-exit-{pid}", daemon=True).start()
    return read_fd
