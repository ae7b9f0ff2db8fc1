"""The keeper: empties a cgroup session when the process that made it is gone.

One small process per session holds the read end of a pipe whose only write
end the supervisor keeps (close-on-exec, so no command inherits it).  When the
supervisor exits -- normally, or killed with SIGKILL -- the pipe reaches EOF
and the keeper kills every process of the session's command cgroups and
removes them: nothing a command started (``setsid``, a double fork, ``nohup``)
outlives its supervisor for more than a moment.

The keeper runs outside every sandbox, in its own session (a terminal's ^C or
a signal to the supervisor's process group does not reach it), and ignores
the catchable termination signals.  Sandboxed commands cannot signal it:
bwrap puts them in their own pid namespace, Landlock scopes their signals.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dsh.sandbox.helper_env import helper_env

#: The keeper process's own module: it purges the session, so it imports the
#: cgroup code, which this side (started from that code) must not.
KEEPER_MODULE = "dsh.runners.linux.keeper_main"


class Keeper:
    """The supervisor's side: the child process and the pipe's write end."""

    def __init__(self, process: subprocess.Popen[bytes], write_fd: int) -> None:
        self.process = process
        self._write_fd = write_fd

    @classmethod
    def start(cls, dirs: Sequence[Path]) -> Keeper:
        """Start a keeper for the session directories ``dirs`` (raises OSError if it cannot)."""
        if not sys.executable:
            raise OSError("no Python interpreter to run the cgroup keeper with")
        read_fd, write_fd = os.pipe()  # both close-on-exec
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-m", KEEPER_MODULE, *map(str, dirs)],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=helper_env(),  # never a command's loader variables
                start_new_session=True,
                close_fds=True,
                cwd="/",  # keeps no directory of the caller busy
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(process, write_fd)

    def stop(self) -> None:
        """Close the pipe: the keeper purges what is left and exits (not waited for)."""
        if self._write_fd != -1:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = -1
