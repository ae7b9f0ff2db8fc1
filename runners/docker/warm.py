"""The docker runner's warm containers: one per policy shape, and what pins a
container to the inodes its binds were made from."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dsh.runners.docker import client as dc
from dsh.runners.docker.spec import ContainerSpec
from dsh.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    from dsh.runners.docker.parked import Lease
    from dsh.runners.docker.secrets import ContainerSecrets
    from dsh.sandbox.net_proxy import ProxyThread


#: The container's first process: it only keeps the container running.
KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 86400; done"]


def daemon_is_local() -> bool:
    """Is the daemon on this machine (binds then name this host's paths)?"""
    return dc.docker_host().startswith("unix://")


def policy_key(policy: SandboxPolicy) -> tuple[object, ...]:
    """Everything that shapes the container (not cwd, env or argv)."""
    return (policy.mode, policy.workspace, policy.writable_roots, policy.protected_paths,
            policy.read_only_paths, policy.hidden_paths, policy.network, policy.network_allowlist, policy.limits,
            policy.home)


def identities(spec: ContainerSpec) -> dict[str, tuple[int, int] | None]:
    """(st_dev, st_ino) of each bind target now (``None`` if missing)."""
    if not daemon_is_local():
        return {}
    return {m.target: _identity(m.target) for m in spec.mounts if m.kind == "bind"}


def bind_sources(spec: ContainerSpec) -> dict[str, tuple[int, int] | None]:
    """(st_dev, st_ino) of what each bind should show at its target now: its
    source on the host (``None`` if missing)."""
    return {m.target: _identity(m.source) for m in spec.mounts if m.kind == "bind" and m.source is not None}


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pin_binds(spec: ContainerSpec) -> tuple[dict[str, tuple[int, int] | None], list[int]]:
    """Identities of the bind targets, and O_PATH fds holding them, taken before
    the container is made and held while it lives.

    Holding the inode keeps its number from being reused, so a path the host
    deleted and re-created always shows up as a different inode.
    """
    ids: dict[str, tuple[int, int] | None] = {}
    fds: list[int] = []
    for target in identities(spec):
        try:
            fd = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            ids[target] = None
            continue
        fds.append(fd)
        st = os.fstat(fd)
        ids[target] = (st.st_dev, st.st_ino)
    return ids, fds


@dataclass
class Warm:
    """A running container of one shape, and the pid-file slots of its execs."""

    id: str
    name: str
    spec: ContainerSpec
    # (st_dev, st_ino) of every bind target at creation.  A bind holds the inode,
    # not the name: if the host replaces a protected path (rm -rf .git; git init)
    # the old bind protects nothing, so the container is made anew.
    pinned: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    pin_fds: list[int] = field(default_factory=list)
    # Bind target -> the inode the policy service pinned for its source, as
    # checked inside the running container (``verify``).
    bound: dict[str, tuple[int, int]] = field(default_factory=dict)
    free_slots: list[int] = field(default_factory=list)
    next_slot: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Commands prepared for this container and not started yet.
    pending: int = 0
    # Another policy's container is current: this one goes once idle.
    stale: bool = False
    # The allowlist proxy listening in the container's network namespace.
    proxy: ProxyThread | None = None
    # Its secrets: values and CA for the proxy, the bundle file the container binds.
    secrets: ContainerSecrets | None = None
    # Kept between processes: the hold on its use file (one process at a
    # time uses it) and the write end of its keeper's stdin (held by the
    # process that made it).
    lease: Lease | None = None
    keeper_fd: int = -1

    def take_slot(self) -> int:
        with self.lock:
            self.pending = max(0, self.pending - 1)
            if self.free_slots:
                return self.free_slots.pop()
            self.next_slot += 1
            return self.next_slot

    def give_slot(self, slot: int) -> None:
        with self.lock:
            self.free_slots.append(slot)

    def reserve(self) -> None:
        with self.lock:
            self.pending += 1

    def idle(self) -> bool:
        with self.lock:
            return self.pending == 0 and len(self.free_slots) == self.next_slot
