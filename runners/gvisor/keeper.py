"""The keeper: destroys a session's sandboxes when the process that made them is gone.

runsc runs a sandbox as a daemon of its own, so a supervisor killed with
SIGKILL would leave it running.  One small process per session holds the read
end of a pipe whose only write end the supervisor keeps (close-on-exec, so no
command inherits it).  When the supervisor exits -- normally, or killed -- the
pipe reaches EOF and the keeper deletes every sandbox in the session's state
directory (``runsc delete --force`` kills what runs in it) and removes the
directory.  It runs in its own session and ignores the catchable termination
signals; sandboxed commands run on another kernel and cannot signal it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence

_TIMEOUT_S = 60


class Keeper:
    """The supervisor's side: the child process and the pipe's write end."""

    def __init__(self, process: subprocess.Popen[bytes], write_fd: int) -> None:
        self.process = process
        self._write_fd = write_fd

    @classmethod
    def start(cls, runsc: Sequence[str], state_dir: str) -> Keeper:
        """``runsc``: the binary and its global flags (``--root`` included)."""
        if not sys.executable:
            raise OSError("no Python interpreter to run the gVisor keeper with")
        read_fd, write_fd = os.pipe()  # both close-on-exec
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-m", __name__, state_dir, *runsc],
                stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True, cwd="/",
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(process, write_fd)

    def stop(self) -> None:
        """Close the pipe: the keeper deletes what is left and exits (not waited for)."""
        if self._write_fd != -1:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = -1


def purge(state_dir: str, runsc: Sequence[str]) -> None:
    """Delete every sandbox runsc knows in ``state_dir``'s state, then the directory."""
    try:
        listed = subprocess.run([*runsc, "list", "-quiet"], capture_output=True, text=True,
                                timeout=_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL).stdout.split()
    except (OSError, subprocess.SubprocessError):
        listed = []
    for cid in listed:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([*runsc, "delete", "-force", cid], capture_output=True, timeout=_TIMEOUT_S,
                           check=False, stdin=subprocess.DEVNULL)
    shutil.rmtree(state_dir, ignore_errors=True)


def main(argv: Sequence[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 512):
            pass  # nothing is ever written: only EOF matters
    purge(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
