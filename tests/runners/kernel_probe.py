"""What the bwrap and docker kernel-interface tests run inside the sandbox."""

from __future__ import annotations

import os

#: Opens for writing every file under the kernel trees.  It never writes:
#: procfs and sysfs check permission and the read-only mount at open, and
#: writing arbitrary tunables would change the host whenever this test fails.
WRITE_PROBE = r"""
import errno, json, os, sys
opened, tried = [], 0
for top in sys.argv[1:]:
    if os.path.isfile(top):
        walk = [(os.path.dirname(top), [], [os.path.basename(top)])]
    else:
        walk = os.walk(top)
    for d, _, files in walk:
        for f in files:
            p = os.path.join(d, f)
            tried += 1
            try:
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
            except OSError:
                continue
            os.close(fd)
            opened.append(p)
print(json.dumps({"tried": tried, "opened": opened}))
"""

#: Everything in /proc but the processes (their own knobs), and all of /sys.
KERNEL_TREES = [
    *(f"/proc/{e}" for e in sorted(os.listdir("/proc")) if not e.isdigit() and e not in ("self", "thread-self")),
    "/sys",
]

