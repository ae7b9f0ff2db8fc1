"""Kernel interfaces inside a bwrap sandbox: read-only tunables, masked leaks.

A caller that is root stays host uid 0 inside the sandbox (bwrap maps uid 0 to
itself), and permission to write a sysctl is decided by that uid and the file
mode, not by a capability: a fresh ``/proc`` would leave every host-global
tunable (``kernel.core_pattern`` runs a program as host root) writable even
with every capability dropped.  So, after ``--proc``:

- ``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq``, ``/proc/bus`` and
  ``/proc/fs`` are bound read-only.  The source is the host's procfs, which is
  equivalent: a sysctl's value comes from the namespaces of the process that
  reads it (its own network, IPC and UTS namespaces), not from the mount;
- files that leak kernel state or other users' secrets (``/proc/kcore``,
  ``/proc/keys``, ``/proc/timer_list``, ...) are covered by ``/dev/null`` and
  directories such as ``/proc/acpi`` or ``/sys/firmware`` by an empty read-only
  tmpfs.

``/sys`` and every mount below it (cgroupfs included) is read-only already:
``--ro-bind / /`` remounts each submount read-only, and bwrap fails rather than
leave one writable.

Running root's command as another uid would not help: the uid bwrap shows
inside is mapped back to the caller's, so files would still be written as host
root, and a different host uid could not write a workspace the caller owns.
The defence is therefore no capability in any set (``--cap-drop ALL``), no new
privileges, and no writable kernel interface.

Which entries exist depends on the kernel: the list is built once per runner
from the host's ``/proc`` and ``/sys`` (bwrap cannot mount over a missing one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Tunables and control files: visible, but never writable.
READ_ONLY = (
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
)

#: Kernel memory, keys, timers and firmware: not even readable.
MASKED = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/kmsg",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/sys/kernel/debug",
    "/sys/kernel/tracing",
    "/sys/kernel/security",
)


@dataclass(frozen=True)
class KernelCover:
    """The bwrap arguments (after ``--proc /proc``) and what they cover."""

    args: tuple[str, ...]
    read_only: tuple[str, ...]
    masked: tuple[str, ...]

    def describe(self) -> list[str]:
        return [
            "kernel interfaces read-only: " + ", ".join(self.read_only) + "; /sys and cgroupfs read-only",
            "masked (unreadable): " + ", ".join(self.masked),
        ]


def kernel_cover() -> KernelCover:
    """Arguments covering the kernel interfaces this host has."""
    args: list[str] = []
    read_only = [p for p in READ_ONLY if os.path.lexists(p)]
    for path in read_only:
        args += ["--ro-bind", path, path]
    masked: list[str] = []
    for path in MASKED:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", path]
        else:
            continue
        masked.append(path)
    return KernelCover(tuple(args), tuple(read_only), tuple(masked))
