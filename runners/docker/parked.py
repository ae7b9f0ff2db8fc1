"""Containers kept warm between processes: the next ``dsh-sandbox run`` of the
same workspace and policy costs one exec, not a container.

A container made to be kept is owned (its owner labels) by a *parking keeper*:
a small host process started before the container, in its own session,
ignoring the catchable termination signals.  While the session that made the
container lives, the keeper only waits (its stdin is a pipe whose write end
that session holds).  Then it watches the container's *use file*, named by the
container's id in the docker runner's private state directory (hidden from
every run, no writable root may hold it):

- the one process using the container holds an exclusive ``flock`` on the file, sets
  its mtime to 0 (in use) and to the time it lets go when it does; a file
  still at 0 that nobody holds was left by a process that died using the
  container (its own keeper dead too): the container goes at once, with what
  that process ran;
- the keeper takes the lock exclusively once nobody holds it and the file is
  older than the idle time; it then unlinks the file (a process that opened it
  earlier finds it unlinked once it gets the lock, and leaves the container
  alone) and removes the container.

So a kept container goes when it has been idle that long, when its use file is
removed (its policy changed: ``evict``), and when its keeper dies: its owner
labels then name a dead process, and the next run of the user reaps it
(``reap_dead_owners``).  A process that uses a kept container also lists it
with its own ``DockerKeeper``: if that process dies mid-command, the container
is removed with whatever still runs in it, as for any container.

A kept container is found again only by the labels that say whose it is (uid
and host) and what it is: the hash of everything that shapes it (``shape``:
the create arguments, which name the workspace and every bind, the image id
and the user).  Before a command runs in it, its binds are checked again
against the inodes this run's policy pinned, as when it was made.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import subprocess
import time
from typing import Any

from dsh.runners.docker import client as dc
from dsh.runners.docker.keeper import connection_env
from dsh.runners.docker.spec import ContainerSpec, mounts_beneath
from dsh.runners.pipe_keeper import start_keeper

LABEL_SHAPE = "dsh-sandbox.shape"
LABEL_WORKSPACE = "dsh-sandbox.workspace"
PARKING_KEEPER_NAME = "dsh-docker-parked"
_STATE_FIX = "set XDG_RUNTIME_DIR to a private directory (mode 0700) of yours, or pass --keep-warm 0"

_KEEPER = r"""
import fcntl, os, signal, sys, time
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
    signal.signal(s, signal.SIG_IGN)
directory, idle = sys.argv[2], float(sys.argv[3])
cid = sys.stdin.buffer.readline().strip().decode("ascii", "replace")
if not (len(cid) == 64 and all(c in "0123456789abcdef" for c in cid)):
    sys.exit(0)
for _ in sys.stdin.buffer:
    pass
path = os.path.join(directory, cid)
while True:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        break
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            wait = min(idle, 5.0)
        else:
            info = os.fstat(fd)
            age = time.time() - info.st_mtime
            if info.st_nlink == 0 or age >= idle or age < -1:
                if info.st_nlink:
                    os.unlink(path)
                break
            wait = idle - age
    finally:
        os.close(fd)
    time.sleep(min(wait, 5.0) + 0.05)
from dsh.runners.docker.keeper import purge
purge([cid])
"""


def shape_of(spec: ContainerSpec, image_id: str, keepalive: list[str]) -> str:
    """The hash of everything that shapes a container: two processes compute
    the same one for the same workspace, policy, image and runner options.

    The create arguments name the workspace, every bind and the user; the
    host's mounts beneath the binds (id and point) are carried along by them,
    so a mount made or removed since is another shape."""
    sources = [m.source for m in spec.mounts if m.kind == "bind" and m.source and m.source != os.devnull]
    below = sorted((e.mount_id, e.point) for e in mounts_beneath(sources))
    data = {"create": spec.docker_kwargs(), "image": image_id, "command": keepalive,
            "own_tmp": spec.own_tmp, "mounts below": below}
    text = json.dumps(data, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


#: The time a use file carries while a process uses its container; one that
#: lets go sets the time it did, from which the idle time counts.
IN_USE = (0, 0)


class Lease:
    """A shared lock on a kept container's use file: while held, its keeper
    does not remove it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def release(self, *, touch: bool = True) -> None:
        """Let go; ``touch`` restarts the idle time."""
        if self._fd == -1:
            return
        try:
            if touch:
                with contextlib.suppress(OSError):
                    os.utime(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1


class Parking:
    """The docker runner's private directory of use files, and the keepers."""

    def __init__(self, idle_s: float) -> None:
        from dsh.sandbox.errors import SandboxUnavailable
        from dsh.sandbox.own_dirs import first_own_dir
        from dsh.sandbox.own_state import runner_state_candidates

        self.idle_s = idle_s
        own, tried = first_own_dir(runner_state_candidates("docker", os.environ, os.geteuid()),
                                   "kept containers' directory", _STATE_FIX)
        if own is None:
            raise SandboxUnavailable("no private directory for the kept containers' use files: tried "
                                     + "; ".join(tried) + "; " + _STATE_FIX, runner="docker")
        self.fd = own.fd
        self.path = own.path

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    # -- the keeper ----------------------------------------------------------------
    def start_keeper(self) -> tuple[subprocess.Popen[bytes], int]:
        """A parking keeper, waiting for the id of the container it will own;
        returns it and the write end of its stdin (close it to let it watch)."""
        return start_keeper(_KEEPER, [PARKING_KEEPER_NAME, str(self.path), repr(self.idle_s)], connection_env())

    # -- use files -----------------------------------------------------------------
    def lease_new(self, container_id: str) -> Lease:
        """The use file of a container just made, held and marked in use."""
        fd = os.open(container_id, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.utime(fd, IN_USE)
        except BaseException:
            os.close(fd)
            raise
        return Lease(fd)

    def lease(self, container_id: str) -> tuple[Lease | None, bool]:
        """This process's hold on a kept container, marked in use; and whether
        the container must go instead.

        None if another run uses it (a kept container serves one run at a time)
        or its keeper is removing it.  A use file still marked in use that
        nobody holds was left by a process that died using the container with
        its own keeper (a process that lets go clean sets the time), and one
        dated in the future was not set by a run: either way the file is
        unlinked and the caller removes the container (True)."""
        try:
            fd = os.open(container_id, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None, False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            info = os.fstat(fd)
            if not info.st_nlink:
                raise OSError("removed by its keeper")
            if info.st_mtime == IN_USE[1] or info.st_mtime > time.time() + 1:
                os.unlink(container_id, dir_fd=self.fd)
                os.close(fd)
                return None, True
            os.utime(fd, IN_USE)
            return Lease(fd), False
        except OSError:
            pass
        os.close(fd)
        return None, False

    def forget(self, container_id: str) -> None:
        """The container was removed: its keeper may go."""
        with contextlib.suppress(OSError):
            os.unlink(container_id, dir_fd=self.fd)

    def evict(self, container_id: str) -> bool:
        """Take a kept container from its keeper if nobody uses it: True if the caller may remove it."""
        try:
            fd = os.open(container_id, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.fstat(fd).st_nlink:
                return False
            os.unlink(container_id, dir_fd=self.fd)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    # -- finding them --------------------------------------------------------------
    @staticmethod
    def kept(client: Any, **labels: str) -> list[dict[str, Any]]:
        """This user's running kept containers on this host with ``labels``."""
        mine = {dc.LABEL: "1", dc.LABEL_OWNER_UID: str(os.getuid()), dc.LABEL_OWNER_HOST: socket.gethostname(),
                **labels}
        found = client.api.containers(filters={"label": [f"{k}={v}" for k, v in mine.items()]})
        # The daemon's filter is trusted for nothing: every label is compared again.
        return [info for info in found if all((info.get("Labels") or {}).get(k) == v for k, v in mine.items())]

    def tidy(self, client: Any) -> None:
        """Remove the use files of containers that are gone (their keeper was killed
        with them, or a prune removed them) and that nobody holds."""
        names = [n for n in os.listdir(self.fd) if len(n) == 64 and all(c in "0123456789abcdef" for c in n)]
        if not names:
            return
        alive = {info["Id"] for info in client.api.containers(all=True, filters={"label": dc.LABEL})}
        for name in names:
            if name not in alive:
                self.evict(name)
