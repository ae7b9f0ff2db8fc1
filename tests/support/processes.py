"""Finding this host's processes by their command line, from /proc."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def pids_where(test: Callable[[bytes], bool]) -> list[int]:
    """Live processes other than this one whose raw command line (NUL-separated
    arguments) passes ``test``; zombies have an empty one."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue  # gone since the listing
        if test(cmdline):
            found.append(int(entry))
    return found


def pids_with(mark: str) -> list[int]:
    """Live processes whose command line contains ``mark`` anywhere."""
    return pids_where(lambda cmdline: mark.encode() in cmdline)


def describe(pids: list[int]) -> str:
    """What is left, for a failure message: pid, state, parent, pgid, cmdline."""
    parts = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state = next((x for x in status.splitlines() if x.startswith("State:")), "")
        parts.append(f"pid {pid} {state} ppid {stat[1]} pgid {stat[2]}: {cmd}")
    return "; ".join(parts) or "(gone meanwhile)"
