"""The keeper process (``python -m dsh.runners.linux.keeper_main DIR...``): waits
for EOF on stdin, then kills and removes the session's command cgroups.

See ``keeper.py`` for the supervisor's side and why it exists.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from dsh.runners.linux.cgroups import CgroupSession


def main(argv: Sequence[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 512):
            pass  # nothing is ever written: only EOF matters
    CgroupSession.attach([Path(a) for a in argv]).purge()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
