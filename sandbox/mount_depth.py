"""How deep a mounted path may lie: the refusal bwrap and gVisor share."""

from __future__ import annotations

import os

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.mount_facts import depth
from dsh.sandbox.mount_plan import MountPlan

#: How deep (directories below ``/``) a mounted path may lie, and how long.
MAX_DEPTH = 200
PATH_MAX = 4096


def refuse_too_deep(plan: MountPlan, runner: str) -> None:
    """A path kept read-only that lies too deep to mount: a clean refusal.

    Every writable directory above it becomes a mount point; bwrap reads the
    whole mount table after each bind (its setup grows with the cube of the
    depth: 400 levels take seconds, 1500 minutes), runsc's start fails past a
    couple of hundred, and past ``PATH_MAX`` the kernel refuses the mount.  A
    command can make such a tree; the next run says so and runs nothing,
    rather than stalling or failing midway.  Every entry is held to both limits."""
    for entry in plan.entries:
        levels, size = depth(entry.path), len(os.fsencode(entry.path))
        if entry.kind != "show" and (levels > MAX_DEPTH or size >= PATH_MAX):
            shown = entry.path if len(entry.path) <= 160 else f"{entry.path[:80]}...{entry.path[-60:]}"
            raise SandboxUnavailable(
                f"the path {shown} ({entry.why}) lies {levels} directories deep ({size} bytes); {runner} mounts "
                f"every directory above a path it keeps read-only, and more than {MAX_DEPTH} levels (or {PATH_MAX} "
                "bytes) would stall it or fail its start; nothing ran: remove or flatten that tree, or run with "
                "another runner (--runner landlock)",
                runner=runner,
            )
