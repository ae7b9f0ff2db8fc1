"""The protections the Linux runners share, timed alone for ``dsh-sandbox bench``.

Each measure does exactly the work a run does for that protection, and leaves
nothing behind: a cgroup made here is removed, a compiled filter is only bytes.
"""

from __future__ import annotations

import itertools

from dsh.runners.linux import bpf, seccomp
from dsh.runners.linux.cgroups import CgroupSession
from dsh.sandbox.runner import ProtectionCost


def filter_cost(label: str, policy: seccomp.SyscallPolicy, per: str) -> list[ProtectionCost]:
    """Compiling the syscall filter of ``policy`` for this machine (none on an
    architecture the filter does not know: the runner refuses to run there)."""
    try:
        arch = seccomp.native_arch()
    except seccomp.UnsupportedArch:
        return []
    return [ProtectionCost(label, lambda: bpf.compile_bpf(seccomp.rules(policy), arch), per)]


def cgroup_costs(tag: str) -> list[ProtectionCost]:
    """A session's first command cgroup with the keeper that removes it (paid
    once per ``dsh-sandbox run``), and a pooled one taken and given back (paid
    per command of a longer session).  None where no cgroup is writable."""
    if not CgroupSession(tag, keeper=False).dirs:
        return []
    # A name of its own each time: a session's directories go with its keeper,
    # which may still be removing the last one's.
    made = itertools.count()

    def first_command() -> None:
        session = CgroupSession(f"{tag}-{next(made)}")
        try:
            session.release(session.command())
        finally:
            session.close()

    pooled = CgroupSession(tag)

    def next_command() -> None:
        pooled.release(pooled.command())

    return [
        ProtectionCost("command cgroup and its keeper, made and removed", first_command, "CLI run"),
        ProtectionCost("command cgroup from the session's pool", next_command, "command", pooled.close),
    ]
