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
import subprocess
import threading
from collections.abc import Sequence

from dsh.runners.pipe_keeper import start_keeper


class Keeper:
    """The supervisor's side: the child process and the pipe's write end."""

    def __init__(self, process: subprocess.Popen[bytes], write_fd: int) -> None:
        self.process = process
        self._write_fd = write_fd

    @classmethod
    def start(cls, runsc: Sequence[str], state_dir: str) -> Keeper:
        """``runsc``: the binary and its global flags (``--root`` included)."""
        process, write_fd = start_keeper(SCRIPT, [state_dir, *runsc], None)
        return cls(process, write_fd)

    def stop(self) -> None:
        """Close the pipe: the keeper deletes what is left and exits; a
        daemon thread reaps it then (the caller does not wait for it)."""
        if self._write_fd != -1:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = -1
            threading.Thread(target=self.process.wait, name="dsh-gvisor-keeper-reap", daemon=True).start()


#: The keeper's own program, run with ``python -I -c``: it imports nothing of
#: dsh, so it works however dsh was installed (``-I`` ignores PYTHONPATH and
#: the user's site directory, which a keeper in ``-m`` form would need).
SCRIPT = """
import contextlib, os, shutil, signal, subprocess, sys
for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
    signal.signal(sig, signal.SIG_IGN)
with contextlib.suppress(OSError):
    while os.read(0, 512):
        pass
state, runsc = sys.argv[1], sys.argv[2:]
def run(*args):
    return subprocess.run([*runsc, *args], capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)
try:
    listed = run("list", "-quiet").stdout.split()
except (OSError, subprocess.SubprocessError):
    listed = []
for cid in listed:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        run("delete", "-force", cid)
shutil.rmtree(state, ignore_errors=True)
"""
