"""From a ``MountPlan`` and a policy to the OCI ``config.json`` of a warm sandbox (pure).

The sandbox's root is the host's ``/``, read-only, served by runsc's gofer;
``/proc``, ``/dev`` and ``/sys`` are gVisor's own (nothing of the host's kernel
interfaces).  On top come the plan's entries, in its order (more specific
paths last): writable roots and pins bound read-write, protected paths and
placeholders bound read-only, hidden paths covered by an empty read-only
tmpfs or by ``/dev/null``.  Every bind is ``nosuid`` and ``nodev``.

The keep-alive process and every command run with the caller's uid and gid
(as root: uid 0 with no capability), an empty capability set and
``noNewPrivileges``.  Without root the sandbox gets a user namespace mapping
the caller's uid and gid as 0 inside (runsc needs its root mapped; the gofer
runs as the caller, so the host's permissions are the caller's).
Limits are rlimits of the sandbox, which every ``runsc exec`` inherits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.mount_plan import MountPlan
from dsh.sandbox.policy import ResourceLimits

KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 86400; done"]
_BIND = ["rbind", "nosuid", "nodev"]
_NO_CAPS: dict[str, list[str]] = {k: [] for k in ("bounding", "effective", "permitted", "inheritable", "ambient")}


@dataclass(frozen=True)
class Identity:
    """Who the commands run as on the host."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @classmethod
    def current(cls) -> Identity:
        gid = os.getegid()
        return cls(os.geteuid(), gid, tuple(g for g in os.getgroups() if g != gid))

    @property
    def root(self) -> bool:
        return self.uid == 0

    def inside(self) -> Identity:
        """The ids commands run with in the sandbox.  Without root, runsc needs
        the user namespace's root mapped: the caller's uid and gid are mapped as
        0 (no capability there either; supplementary groups cannot be mapped)."""
        return self if self.root else Identity(0, 0)


#: How many host paths one sandbox may bind.  Each bind holds a file
#: descriptor of runsc's sandbox process, which remaps its standard streams
#: at descriptor 256: runsc 2022-12 (Debian 12) fails to boot past 237 binds
#: ("FD 256 is already in use"), reported only as a start that hit EOF.
MAX_BINDS = 230


def refuse_too_many_binds(plan: MountPlan) -> None:
    """Refuse a plan with more binds than runsc starts with (``oci_mounts`` binds these kinds)."""
    binds = sum(1 for e in plan.entries if e.kind in ("writable", "pin", "read-only", "placeholder", "mask-file")
                or (e.kind == "private-tmp" and e.source is not None))
    if binds > MAX_BINDS:
        raise SandboxUnavailable(
            f"the plan binds {binds} host paths (every protected .git part of each nested repository, each "
            f"hidden file, ...); runsc fails to start past about {MAX_BINDS} (each bind holds one of its file "
            "descriptors); nothing ran: run with --runner bwrap, or hide directories rather than many files",
            runner="gvisor",
        )


def oci_mounts(plan: MountPlan) -> list[dict[str, Any]]:
    """The plan's entries as OCI mounts, in order (``show`` entries need nothing: the host is underneath)."""
    mounts: list[dict[str, Any]] = []
    # A mask with something bound beneath it (a state directory, with this
    # run's own HOME shown again) must be traversable; it stays empty and read-only.
    over = {e.path for e in plan.entries if e.kind == "mask-dir"
            and any(o.path != e.path and o.path.startswith(e.path.rstrip("/") + "/") for o in plan.entries)}
    for entry in plan.entries:
        if entry.kind in ("writable", "pin"):
            mounts.append({"destination": entry.path, "type": "bind", "source": entry.path,
                           "options": [*_BIND, "rw"]})
        elif entry.kind == "private-tmp" and entry.source is not None:
            mounts.append({"destination": entry.path, "type": "bind", "source": entry.source,
                           "options": [*_BIND, "rw"]})
        elif entry.kind in ("read-only", "placeholder"):
            mounts.append({"destination": entry.path, "type": "bind", "source": entry.path,
                           "options": [*_BIND, "ro"]})
        elif entry.kind == "mask-dir":
            mode = "mode=555" if entry.path in over else "mode=000"
            mounts.append({"destination": entry.path, "type": "tmpfs", "source": "tmpfs",
                           "options": ["ro", "nosuid", "nodev", "noexec", mode]})
        elif entry.kind == "mask-file":
            mounts.append({"destination": entry.path, "type": "bind", "source": os.devnull,
                           "options": [*_BIND, "ro"]})
    return mounts


def rlimits(limits: ResourceLimits) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, value in (("RLIMIT_NPROC", limits.max_processes), ("RLIMIT_AS", limits.max_memory_bytes),
                        ("RLIMIT_FSIZE", limits.max_file_size_bytes)):
        if value is not None:
            out.append({"type": name, "hard": value, "soft": value})
    return out


def build_config(plan: MountPlan, *, identity: Identity, limits: ResourceLimits,
                 masked: Sequence[str] = (), network: bool = False) -> dict[str, Any]:
    """The bundle's ``config.json``; ``masked``: runner paths no command may see (its state).

    ``network``: the host's network (runsc ``--network=host`` serves it from
    the namespace runsc runs in, so the sandbox gets no network namespace of
    its own); otherwise gVisor's loopback only (``--network=none``).
    """
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"}, *oci_mounts(plan)]
    mounts += [{"destination": p, "type": "tmpfs", "source": "tmpfs", "options": ["ro", "nosuid", "nodev",
                                                                                   "noexec", "mode=000"]}
               for p in masked]
    namespaces = [{"type": t} for t in ("pid", "mount", "uts", "ipc", *(() if network else ("network",)))]
    linux: dict[str, Any] = {"namespaces": namespaces}
    if not identity.root:
        namespaces.append({"type": "user"})
        linux["uidMappings"] = [{"containerID": 0, "hostID": identity.uid, "size": 1}]
        linux["gidMappings"] = [{"containerID": 0, "hostID": identity.gid, "size": 1}]
    return {
        "ociVersion": "1.0.0",
        "root": {"path": "/", "readonly": True},
        "hostname": "dsh-sandbox",
        "process": process(KEEPALIVE, env=["PATH=/usr/bin:/bin"], cwd="/", identity=identity.inside(),
                           limits=limits),
        "mounts": mounts,
        "linux": linux,
    }


def process(args: Sequence[str], *, env: Sequence[str], cwd: str, identity: Identity,
            limits: ResourceLimits | None = None) -> dict[str, Any]:
    """An OCI process: the keep-alive, or one command (``runsc exec --process``)."""
    proc: dict[str, Any] = {
        "terminal": False,
        "user": {"uid": identity.uid, "gid": identity.gid, "additionalGids": list(identity.groups)},
        "args": list(args),
        "env": list(env),
        "cwd": cwd,
        "capabilities": _NO_CAPS,
        "noNewPrivileges": True,
    }
    if limits is not None:
        proc["rlimits"] = rlimits(limits)
    return proc
