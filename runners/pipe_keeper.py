"""Start a keeper: a small host process a runner feeds through a pipe.

Each runner that leaves something behind a process (a container, a gVisor
sandbox, a kept container) starts one: ``python -I -c SCRIPT`` reading the
pipe's read end on its stdin, in its own session (a terminal's ^C does not
reach it), in ``/`` (it keeps no directory of the caller busy), with no other
descriptor.  The runner holds the only write end (close-on-exec: no command
or helper inherits it), so the keeper sees EOF when the runner's process is
gone, however it died.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence


def start_keeper(script: str, args: Sequence[str],
                 env: Mapping[str, str] | None) -> tuple[subprocess.Popen[bytes], int]:
    """The keeper running ``script`` with ``args``, and the write end of its stdin
    (raises OSError if it cannot start)."""
    if not sys.executable:
        raise OSError("no Python interpreter to run the keeper with")
    read_fd, write_fd = os.pipe()  # both close-on-exec
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", script, *args],
            stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True, close_fds=True, cwd="/",
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return process, write_fd
