"""The keeper process (``python -m dsh.runners.linux.keeper_main DIR...``): waits
for EOF on stdin, then kills and removes the session's command cgroups.

See ``keeper.py`` for the supervisor's side and why it exists.  The cgroup
code is imported only once the wait is over: a keeper starts with every run
that sets limits, beside the run itself, and its imports (over 30 ms of CPU
on this module's first version) would compete with the run for the cores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 512):
            pass  # nothing is ever written: only EOF matters
    from pathlib import Path

    from dsh.runners.linux.cgroups import CgroupSession

    CgroupSession.attach([Path(a) for a in argv]).purge()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
