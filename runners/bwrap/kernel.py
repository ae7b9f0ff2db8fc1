"""Kernel interfaces inside a bwrap sandbox: read-only tunables, masked leaks.

A caller that is root stays host uid 0 inside the sandbox (bwrap maps uid 0 to
itself), and permission to write a sysctl, ``/proc/sysrq-trigger`` or
``/proc/acpi/wakeup`` is decided by that uid and the file mode, not by a
capability: a fresh ``/proc`` leaves every host-global tunable
(``kernel.core_pattern`` runs a program as host root) writable even with
every capability dropped.  So, after ``--proc``:

- files that leak other processes' or users' state without any capability
  (``/proc/keys``, ``/proc/timer_list``, ...) are covered by ``/dev/null``, and
  directories root could read (``/sys/firmware`` with the ACPI tables, debugfs
  where mounted) by an empty read-only tmpfs;
- the whole ``/proc`` mount is remounted read-only: one operation covers
  ``/proc/sys``, ``sysrq-trigger``, ``irq``, ``bus``, ``fs``, ``acpi``,
  ``pressure``... whatever this kernel has, instead of a list that misses the
  next one.  Writes through ``/proc/self/fd/N`` still reach the file behind the
  fd (the magic link leaves this mount); what stops working is writing the
  command's own ``/proc/PID`` knobs (``oom_score_adj``, ``coredump_filter``).

``/sys`` and every mount below it (cgroupfs included) is read-only already:
``--ro-bind / /`` remounts each submount read-only, and bwrap fails rather than
leave one writable.  ``/proc/kcore`` and ``/proc/kmsg`` need capabilities the
command does not have.

Running root's command as another uid would not help: the uid bwrap shows
inside is mapped back to the caller's, so files would still be written as host
root, and a different host uid could not write a workspace the caller owns.
The defence is therefore no capability in any set (``--cap-drop ALL``), no new
privileges, and no writable kernel interface.

Which entries exist depends on the kernel: the list is built once per runner
from the host's ``/proc`` and ``/sys`` (bwrap cannot mount over a missing one;
an empty directory has nothing to mask).  Every mount costs bwrap a scan of
its mount table, hence one remount rather than one bind per tunable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Readable by anyone, about everyone: masked.
MASKED_FILES = (
    "/proc/keys",
    "/proc/key-users",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/timer_list",
    "/proc/timer_stats",
)

#: Readable by root (the caller's uid): masked when not empty.
MASKED_DIRS = (
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/sys/kernel/debug",
    "/sys/kernel/tracing",
    "/sys/kernel/security",
)


@dataclass(frozen=True)
class KernelCover:
    """The bwrap arguments (after ``--proc /proc``) and what they mask."""

    args: tuple[str, ...]
    masked: tuple[str, ...]

    def describe(self) -> list[str]:
        return [
            "remount-ro /proc (every kernel tunable and control file read-only); /sys and cgroupfs read-only",
            "masked (unreadable): " + ", ".join(self.masked),
        ]


def _non_empty_dir(path: str) -> bool:
    try:
        return os.path.isdir(path) and bool(os.listdir(path))
    except OSError:
        return True  # cannot look inside: mask it


def kernel_cover() -> KernelCover:
    """Arguments covering the kernel interfaces this host has."""
    args: list[str] = []
    masked: list[str] = []
    for path in MASKED_FILES:
        if os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", path]
            masked.append(path)
    for path in MASKED_DIRS:
        if _non_empty_dir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
            masked.append(path)
    args += ["--remount-ro", "/proc"]
    return KernelCover(tuple(args), tuple(masked))
