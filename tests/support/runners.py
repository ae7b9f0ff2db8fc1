"""Shared by the runner tests: the outcome of a command spawned directly, a
reader for a remote runner's output pipes, and the interpreter a test may run
as nobody."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from dsh.sandbox.runner import ExitStatus, RemoteProcess

from tests.support.wait import PATIENCE_S


@dataclass(frozen=True)
class Completed:
    """A finished command: how it ended and everything it wrote."""

    status: ExitStatus
    stdout: bytes
    stderr: bytes

    @classmethod
    def from_returncode(cls, returncode: int, stdout: bytes, stderr: bytes) -> Completed:
        """From ``Popen.returncode`` (negative: killed by that signal)."""
        status = ExitStatus(None, -returncode) if returncode < 0 else ExitStatus(returncode)
        return cls(status, stdout, stderr)

    @property
    def returncode(self) -> int:
        """As ``Popen.returncode`` reports it: the exit code, or minus the signal."""
        if self.status.exit_code is not None:
            return self.status.exit_code
        return -(self.status.signal or 0)

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class RemoteReader:
    """Reads both pipes of a ``RemoteProcess`` in threads: a full pipe would
    stall the runner's pump, and a test would deadlock reading them in turn."""

    def __init__(self, proc: RemoteProcess) -> None:
        self.proc = proc
        self.chunks = {proc.stdout_fd: bytearray(), proc.stderr_fd: bytearray()}
        #: Set once either stream has written a whole line (the command is up).
        self.first_line = threading.Event()
        self.threads = [threading.Thread(target=self._read, args=(fd,), daemon=True) for fd in self.chunks]
        for thread in self.threads:
            thread.start()

    def _read(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 1 << 16):
                self.chunks[fd] += chunk
                if b"\n" in chunk:
                    self.first_line.set()
        finally:
            os.close(fd)

    def stdout_so_far(self) -> bytes:
        return bytes(self.chunks[self.proc.stdout_fd])

    def finish(self) -> Completed:
        """Wait for the command and the end of both streams, then release it."""
        status = self.proc.wait(PATIENCE_S)
        assert status is not None, f"the command did not finish within {PATIENCE_S:g} s"
        for thread in self.threads:
            thread.join(PATIENCE_S)
            assert not thread.is_alive(), "an output stream did not end"
        self.proc.close()
        return Completed(status, bytes(self.chunks[self.proc.stdout_fd]), bytes(self.chunks[self.proc.stderr_fd]))


def nobody_python() -> str | None:
    """An interpreter with this project installed that nobody can run, when the
    test command made one (``DSH_NOBODY_PYTHON``, set by tests/run.sh as root)."""
    return os.environ.get("DSH_NOBODY_PYTHON") or None
