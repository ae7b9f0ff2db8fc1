"""From a ``SandboxPolicy`` to the shape of the warm container (no daemon).

The container is what enforces the mode, so everything that shapes it (mode,
mounts, network, limits) is decided here, once per distinct shape;
``ContainerSpec`` doubles as the key the runner caches its containers by.
Its mounts are the core mount plan translated (``mounts``): only what the
container binds exists in it, which is stricter than the local runners'
read-only host.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass, field
from typing import Any

from dsh.runners.docker.mounts import CONTROL_DIR, MountSpec, container_view, placeholders
from dsh.runners.linux.mount_check import MountEntry, mount_table
from dsh.runners.linux.seccomp_docker import container_profile
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import TMP
from dsh.sandbox.numeric import MIN_MEMORY_BYTES, byte_count
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import path_within
from dsh.sandbox.runner import Gap

__all__ = ["CONTROL_DIR", "ContainerSpec", "MountSpec", "build_spec", "container_env", "mount_points_below"]


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    user: str
    mounts: tuple[MountSpec, ...]
    network_mode: str  # "none" or "host"
    read_only_root: bool
    pids_limit: int | None
    mem_limit: int | None
    fsize_limit: int | None
    # Missing protected paths get an empty directory created on the host as a
    # read-only mountpoint (a bind needs one); removed at close if still empty.
    placeholders: tuple[str, ...] = ()
    # The daemon's machine (``uname -m``) for the seccomp profile of a
    # constrained mode; ``None``: Docker's default profile (danger-full-access).
    syscall_machine: str | None = None
    #: What of the policy no bind can hold (a protected path behind a link the
    #: command can replace); not part of the container's shape.
    gaps: tuple[Gap, ...] = field(default=(), compare=False)
    #: The container's own /tmp is the command's $TMPDIR (no session directory is bound).
    own_tmp: bool = False
    #: Who the container's own processes (init, keep-alive) run as, when not ``user``: a
    #: container kept between runs runs them as another uid, which no command can signal,
    #: trace or write into, so every process of ``user`` in it is a command's.
    init_user: str | None = None

    @property
    def seccomp_profile(self) -> str | None:
        return container_profile(self.syscall_machine) if self.syscall_machine else None

    def docker_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``client.containers.create`` (SDK types built lazily)."""
        from docker.types import Mount, Ulimit  # type: ignore[import-untyped]

        binds = [
            Mount(m.target, m.source, type="bind", read_only=m.read_only)
            for m in self.mounts
            if m.kind == "bind"
        ]
        tmpfs = {
            m.target: ("ro," if m.read_only else "rw,") + ("exec," if m.exec_ok else "") + "nosuid,nodev,mode=1777"
            for m in self.mounts
            if m.kind == "tmpfs"
        }
        kwargs: dict[str, Any] = {
            "mounts": binds,
            "tmpfs": tmpfs,
            "network_mode": self.network_mode,
            "read_only": self.read_only_root,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges",
                             *([f"seccomp={self.seccomp_profile}"] if self.seccomp_profile else [])],
            "user": self.init_user or self.user,
            "init": True,
        }
        if self.pids_limit is not None:
            kwargs["pids_limit"] = self.pids_limit
        if self.mem_limit is not None:
            kwargs["mem_limit"] = self.mem_limit
            kwargs["memswap_limit"] = self.mem_limit  # no swap on top of the limit
        if self.fsize_limit is not None:
            kwargs["ulimits"] = [Ulimit(name="fsize", soft=self.fsize_limit, hard=self.fsize_limit)]
        return kwargs


def container_env(env: dict[str, str], spec: ContainerSpec) -> dict[str, str]:
    """``env`` without a ``GIT_CONFIG_GLOBAL`` the container cannot read
    (git would then fail on it rather than fall back to HOME's), and with
    ``$TMPDIR`` at the container's own ``/tmp`` when no session directory is bound."""
    if spec.own_tmp:
        env = {**env, "TMPDIR": TMP}
    named = env.get("GIT_CONFIG_GLOBAL")
    if named is not None and not any(m.kind == "bind" and m.target == named for m in spec.mounts):
        env = {k: v for k, v in env.items() if k != "GIT_CONFIG_GLOBAL"}
    return env


#: A kept container's own processes run as root, or as this uid when the commands run as root.
KEEPER_UID_ROOT_CALLER = "65534:65534"


def build_spec(policy: SandboxPolicy, *, image: str, user: str, pids: int | None,
               memory: int | None, machine: str | None = None, own_tmp: bool = False,
               placeholder_source: str | None = None) -> ContainerSpec:
    """The container for ``policy``: the core mount plan of the filesystem as
    it is now, translated (``own_tmp``, ``placeholder_source``: see ``container_view``)."""
    mounts, plan = container_view(policy, user, own_tmp=own_tmp, placeholder_source=placeholder_source)
    limits = policy.limits
    full = policy.mode is SandboxMode.DANGER_FULL_ACCESS
    return ContainerSpec(
        image=image,
        user=user,
        mounts=mounts,
        network_mode="host" if policy.network or full else "none",
        read_only_root=not full,
        pids_limit=_with_own_processes(limits.max_processes if limits.max_processes is not None else pids),
        mem_limit=limits.max_memory_bytes if limits.max_memory_bytes is not None else memory,
        fsize_limit=limits.max_file_size_bytes,
        placeholders=placeholders(plan, mounts),
        syscall_machine=None if full else machine or platform.machine(),
        gaps=plan.gaps_for("docker"),
        own_tmp=own_tmp and policy.private_tmp is not None,
        init_user=(KEEPER_UID_ROOT_CALLER if user.split(":")[0] in ("0", "root") else "0:0") if own_tmp else None,
    )


def mounts_beneath(roots: list[str], mountinfo: str = "/proc/self/mountinfo") -> list[MountEntry]:
    """The host's mounts strictly inside ``roots``: a bind carries them along
    (and a read-only bind does not make them read-only)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
            table = mount_table(fh.read())
    except OSError:
        return []
    return [e for e in table if any(e.point != r and path_within(e.point, r) for r in roots)]


def mount_points_below(roots: list[str], mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Host mount points strictly inside ``roots``."""
    return sorted({e.point for e in mounts_beneath(roots, mountinfo)})


#: What the container holds besides the command counts against its pids limit:
#: docker's init, the keep-alive's shell and its ``sleep`` (``pids.current`` is
#: 4 during a one-process exec).  Added to the limit, so the policy's
#: ``max_processes`` is the command's own, as on the other runners.
OWN_PROCESSES = 3
#: Each exec's setup (``runc init`` and the processes it clones) joins the
#: container's pids cgroup before the command replaces it, and briefly needs
#: more places than it ends with: with too few free an exec fails at random
#: ("read init-p: connection reset by peer": about 1 in 3 execs of ``true``
#: with five free, 3 in 100 with six, none in 200 with eight).  Once the
#: command runs the room is free, so on docker a command may hold this many
#: processes beyond ``max_processes`` (the report says so).
EXEC_SETUP_PROCESSES = 8
#: What the container's pids limit adds to ``max_processes``.
PIDS_OVERHEAD = OWN_PROCESSES + EXEC_SETUP_PROCESSES


def _with_own_processes(limit: int | None) -> int | None:
    return None if limit is None else limit + PIDS_OVERHEAD


def limits_hint(spec: ContainerSpec, exc: BaseException) -> str:
    """A clause naming the limits a daemon error points at (a refused memory
    limit, a container that died under its limits before the command ran),
    or ``""`` when it points at none."""
    text = str(exc).lower()
    died = "is not running" in text
    named = []
    if spec.mem_limit is not None and (died or "memory" in text):
        named.append(f"max_memory = {spec.mem_limit} bytes")
    if spec.pids_limit is not None and (died or "pids" in text):
        named.append(f"max_processes = {spec.pids_limit - PIDS_OVERHEAD}")
    if not named:
        return ""
    return (f" under its limits ({', '.join(named)}): raise them in the profile's [limits] "
            "or the docker runner's memory/pids options")


_SIZE = LazyPattern(r"^(\d+)\s*([kmg]?)i?b?$", re.IGNORECASE)


def parse_size(value: object, *, field: str) -> int | None:
    if value is None:
        return None
    text = str(value).strip()
    match = _SIZE.match(text) if not isinstance(value, bool) else None
    if match is None:
        raise ConfigError(f"docker runner {field}: {value!r} is not a size; use bytes or e.g. 512m, 2g")
    size: int = int(match.group(1)) * 1024 ** " kmg".index((match.group(2) or " ").lower())
    return byte_count(f"docker runner {field}", size, low=MIN_MEMORY_BYTES)


def create_error(spec: ContainerSpec, exc: Exception) -> str:
    """Our message for the daemon's refusal to create a container."""
    text = str(exc)
    if "bind source path does not exist" in text:
        path = text.split("bind source path does not exist:", 1)[-1].strip().rstrip(")\"' ")
        return (f"cannot create the container: the path {path} it binds disappeared while it was made "
                "(removed by another session's cleanup, or by you); nothing ran, retry")
    return f"cannot create the container{limits_hint(spec, exc)}: {exc}"
