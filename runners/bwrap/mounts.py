"""The filesystem view of a bwrap sandbox: the core mount plan in bwrap's terms.

``dsh.sandbox.mount_plan`` plans the view once for every runner (what is
writable, kept read-only, a placeholder, pinned, the private ``/tmp``, hidden);
this module only names its entries the way ``materialize`` binds them, on top
of ``--ro-bind / /``, ``--dev`` and ``--proc``:

- ``bind`` (``writable``) and ``pin``: bound read-write onto themselves;
- ``ro-bind`` (``read-only``): bound read-only onto itself;
- ``placeholder``: an empty directory made for a protected path that does not
  exist yet, bound read-only onto itself and removed again after the run
  when no other sandbox uses it;
- ``private-tmp``: the session's directory bound at ``/tmp``;
- ``mask-dir`` / ``mask-file``: an empty read-only tmpfs, or ``/dev/null``.

The plan's ``show`` entries are for runners without the host underneath and
are dropped here, and a kept path so deep that pinning every directory above
it would stall bwrap is a clean refusal (``mount_depth.refuse_too_deep``).

A read-only view does not stop ``connect()`` to a unix socket: host sockets
are kept out of reach by the syscall filter (``filter``), not by mounts, so
nothing here depends on which sockets exist when the sandbox starts.

``open_mounts`` (in ``materialize``) opens every bind source as an ``O_PATH``
fd and passes it with ``--bind-fd``/``--ro-bind-fd``: bwrap runs as root in CI,
so a source path swapped for a symlink between planning and mounting must not
redirect a writable bind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from dsh.sandbox import mount_plan
from dsh.sandbox.mount_depth import refuse_too_deep
from dsh.sandbox.mount_plan import gather_facts
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Gap

MountKind = Literal["bind", "pin", "private-tmp", "ro-bind", "placeholder", "mask-dir", "mask-file"]

#: The core plan's kinds under the names bwrap's options go by.
_KIND: dict[str, MountKind] = {
    "writable": "bind", "pin": "pin", "private-tmp": "private-tmp", "read-only": "ro-bind",
    "placeholder": "placeholder", "mask-dir": "mask-dir", "mask-file": "mask-file",
}
_WRITABLE_KINDS = ("bind", "pin")

#: Degradation name a profile lists in ``accept_degraded`` to accept it.
SYMLINK_DEGRADATION = "bwrap-protected-symlink"


@dataclass(frozen=True)
class Mount:
    kind: MountKind
    path: str
    why: str
    source: str | None = None  # private-tmp only: the host directory bound at ``path``

    @property
    def writable(self) -> bool:
        return self.kind in _WRITABLE_KINDS

    def describe(self) -> str:
        source = f" from {self.source}" if self.source else ""
        return f"{self.kind} {self.path}{source} ({self.why})"


@dataclass(frozen=True)
class MountPlan:
    mounts: tuple[Mount, ...]
    degradations: tuple[Gap, ...] = ()
    #: Rules a hidden path overrides, for ``explain``.
    overridden: tuple[str, ...] = ()


def plan_mounts(policy: SandboxPolicy) -> MountPlan:
    """The mounts (beyond ``--ro-bind / /``, ``--dev``, ``--proc``) for ``policy``:
    the core plan of the filesystem as it is now (the command runs as us)."""
    return translate(mount_plan.plan_mounts(policy, gather_facts(policy, os.geteuid())))


def translate(plan: mount_plan.MountPlan) -> MountPlan:
    """The core plan in bwrap's terms; ``SandboxUnavailable`` when it is too deep for bwrap."""
    refuse_too_deep(plan, "bwrap")
    entries = [e for e in plan.entries if e.kind != "show"]
    mounts = tuple(Mount(_KIND[e.kind], e.path, e.why, e.source) for e in entries)
    return MountPlan(mounts, plan.gaps_for("bwrap"), plan.overridden)
