"""The docker runner's side of keeping containers between processes
(``parked`` holds the mechanism): making one to keep, and taking one back."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsh.runners.docker import client as dc
from dsh.runners.docker.parked import LABEL_SHAPE, LABEL_WORKSPACE, Lease, Parking, shape_of
from dsh.runners.docker.spec import ContainerSpec
from dsh.runners.docker.verify import check_container, mounts_in, stat_in
from dsh.runners.docker.warm import KEEPALIVE, Warm, bind_sources, pin_binds
from dsh.runners.linux.orphans import real_uid
from dsh.sandbox.errors import SandboxUnavailable

if TYPE_CHECKING:
    from dsh.runners.docker.keeper import DockerKeeper

@dataclass(frozen=True)
class ParkingKeeper:
    process: subprocess.Popen[bytes]
    fd: int  # the write end of its stdin

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(frozen=True)
class KeptShape:
    """Containers of one shape, kept between processes of this user."""

    client: Any
    parking: Parking
    keeper: DockerKeeper
    spec: ContainerSpec
    workspace: str
    shape: str
    on_placeholders: Callable[[str], None]
    image_id: str

    @classmethod
    def of(cls, client: Any, parking: Parking, keeper: DockerKeeper, spec: ContainerSpec,
           workspace: str, on_placeholders: Callable[[str], None], image_id: str | None) -> KeptShape | None:
        """``image_id``: the probe's, else looked up; a container to keep is made from it."""
        image_id = image_id or dc.find_image(client, spec.image)
        if image_id is None:
            return None  # making the container says what is missing
        shape = shape_of(spec, image_id, KEEPALIVE)
        return cls(client, parking, keeper, spec, workspace, shape, on_placeholders, image_id)

    def labels(self) -> dict[str, str]:
        return {LABEL_SHAPE: self.shape, LABEL_WORKSPACE: self.workspace}

    # -- making one ----------------------------------------------------------------
    def start_keeper(self) -> ParkingKeeper | None:
        """The keeper that will own the container, or None (then it is not kept)."""
        try:
            process, fd = self.parking.start_keeper()
        except OSError:
            return None
        return ParkingKeeper(process, fd)

    def hand_over(self, warm: Warm, keeper: ParkingKeeper) -> None:
        """``warm`` was just made for ``keeper``: tell it which container it owns
        and hold the new use file (raises OSError)."""
        warm.keeper_fd = keeper.fd
        line = warm.id.encode("ascii") + b"\n"
        if os.write(keeper.fd, line) != len(line):
            raise OSError("short write to the parking keeper")
        warm.lease = self.parking.lease_new(warm.id)
        # Reaped whenever it ends (this process may outlive it: a library session).
        threading.Thread(target=keeper.process.wait, name="dsh-docker-parked-reap", daemon=True).start()

    # -- taking one back -----------------------------------------------------------
    def adopt(self, expected: dict[str, tuple[int, int]]) -> Warm | None:
        """A kept container of this shape whose binds are the inodes this run
        pinned, held for this process; None if there is none.

        On the way, the idle kept containers of this workspace made for another
        policy, and those whose keeper is gone, are removed.  Their
        placeholders are left to ``on_placeholders`` (removed when this runner
        closes, if no container binds them then): this run's container may be
        about to bind them."""
        from docker.errors import DockerException  # type: ignore[import-untyped]

        try:
            # One listing: a container of this shape names this workspace too.
            everything = self.parking.kept(self.client, **{LABEL_WORKSPACE: self.workspace})
        except (DockerException, OSError):
            return None
        found = [i for i in everything if (i.get("Labels") or {}).get(LABEL_SHAPE) == self.shape]
        stale = [i for i in everything if i not in found and self.parking.evict(i["Id"])]
        warm = None
        for info in found:
            cid = str(info["Id"])
            if not dc.owner_alive(info.get("Labels") or {}):
                # Its keeper is gone: nothing would remove it once idle.
                if self.parking.evict(cid):
                    stale.append(info)
                continue
            if warm is not None:
                continue
            lease, crashed = self.parking.lease(cid)
            if crashed:
                stale.append(info)
            if lease is None:
                continue  # another run uses it, its keeper is removing it, or it must go
            try:
                warm = self._take(info, expected, lease)
            except Unclean:
                self.parking.forget(cid)
                stale.append(info)
                warm = None
            except (DockerException, SandboxUnavailable, OSError):
                warm = None
            if warm is None:
                lease.release(touch=False)
        for info in stale:
            with contextlib.suppress(DockerException):
                dc.remove_container(self.client, info["Id"])
            for path in dc.placeholders_of(info.get("Labels") or {}):
                self.on_placeholders(path)
        return warm

    def _take(self, info: dict[str, Any], expected: dict[str, tuple[int, int]], lease: Lease) -> Warm | None:
        cid = str(info["Id"])
        state = self.client.api.inspect_container(cid)["State"]
        pid = int(state.get("Pid") or 0)
        if not state.get("Running") or pid <= 0:
            return None
        if not is_clean(self.client, cid, self.spec):
            raise Unclean(cid)
        pinned, fds = pin_binds(self.spec)
        try:
            if None in pinned.values():
                raise SandboxUnavailable("a bind target is gone", runner="docker")
            # Every bind, the read-only ones of protected paths too, must still
            # be mounted and show its source: the host replacing a protected
            # file (a rename over it) or moving a directory aside detaches the
            # container's bind, and the workspace's writable bind shows through.
            sources = bind_sources(self.spec)
            if None in sources.values():
                raise SandboxUnavailable("a bind source is gone", runner="docker")
            binds = {target: identity for target, identity in sources.items() if identity is not None}
            check_container(pid, {**binds, **expected},
                            lambda targets: stat_in(self.client.containers.get(cid), targets),
                            lambda: mounts_in(self.client.containers.get(cid)))
            self.keeper.add(cid)  # removed with what runs in it if this process dies
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        name = str((info.get("Names") or [cid])[0]).lstrip("/")
        warm = Warm(cid, name, self.spec, pinned, fds, dict(expected))
        warm.lease = lease
        return warm


class Unclean(Exception):
    """A kept container runs a process that is not its own."""


def is_clean(client: Any, container_id: str, spec: ContainerSpec) -> bool:
    """Does the container run nothing but its own processes (init and keep-alive)?

    They run as ``spec.init_user``, which no command can become or reach; any
    other process in the container is something a command left: a process
    whose main thread exited while others run (a zombie to ``/proc``), one
    made with ``CLONE_PARENT`` (its parent outside the container), whatever
    escaped the exit sweep.  Asked of the daemon (every process in the
    container's cgroup), each judged by its real uid on this host."""
    if spec.init_user is None:
        return False
    own = int(spec.init_user.split(":")[0])
    top = client.api.top(container_id)
    column = list(top.get("Titles") or []).index("PID")
    for row in top.get("Processes") or []:
        if not str(row[column]).isdigit():
            return False  # what it is cannot be judged
        uid = real_uid(int(row[column]))
        if uid is not None and uid != own:  # None: gone meanwhile
            return False
    return True


def release_kept(warm: Warm, parking: Parking | None) -> None:
    """Let go of ``warm``'s use file and keeper; with ``parking``, the container
    is gone: its use file goes too, so its keeper exits."""
    lease, warm.lease = warm.lease, None
    if parking is not None:
        parking.forget(warm.id)
    if lease is not None:
        lease.release(touch=False)
    fd, warm.keeper_fd = warm.keeper_fd, -1
    if fd != -1:
        with contextlib.suppress(OSError):
            os.close(fd)


def labelable(workspace: str) -> bool:
    """Can a label name ``workspace``?  Labels hold printable UTF-8 text."""
    return workspace.isprintable() and workspace == workspace.encode("utf-8", "replace").decode("utf-8")


def park(warm: Warm, client: Any, keeper: DockerKeeper, let_go: Callable[[Warm], None]) -> bool:
    """Leave ``warm`` to its parking keeper for the next process; False if it
    is not kept (then the caller removes it).  ``let_go`` drops this process's
    hold on it (its pins)."""
    lease = warm.lease
    if lease is None or warm.stale or not warm.idle():
        return False
    try:
        # Whatever a command left that the exit sweep missed goes with the container.
        if not is_clean(client, warm.id, warm.spec):
            return False
    except Exception:  # the daemon cannot say: the container goes
        return False
    let_go(warm)
    # Touched first: the idle time starts now, before this process lets go.
    lease.release(touch=True)
    warm.lease = None
    keeper.forget(warm.id)
    release_kept(warm, None)
    return True
