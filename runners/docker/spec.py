"""From a ``SandboxPolicy`` to the shape of the warm container (pure, no daemon).

The container is what enforces the mode, so everything that shapes it (mode,
roots, protected and hidden paths, network, limits) is decided here, once per
distinct shape; ``ContainerSpec`` doubles as the key the runner caches its
containers by.

Paths: binds keep the host path (the workspace is at the same path inside),
so cwd and absolute paths mean the same thing on both sides.  Only the
workspace, the writable roots (the session's private temporary directory
among them: ``$TMPDIR`` names it) and, read-only, the git repository
enclosing the workspace and the user's ``~/.gitconfig`` (which
``GIT_CONFIG_GLOBAL`` names) are visible; the rest of the host does not exist
in the container, which is stricter than the local runners' read-only.  The
container's ``/tmp`` is its own tmpfs, never the host's.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dsh.runners.linux.mount_check import mount_table
from dsh.runners.linux.seccomp_docker import container_profile
from dsh.sandbox.enclosing_repo import enclosing_repository as core_enclosing_repository
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import fixed_symlink, git_dirs, system_dir_reason

PRIVATE_TMP = Path("/tmp")
# Where each exec's wrapper records its pid for the kill script (a tmpfs).
CONTROL_DIR = "/run/dsh-sandbox"
_RESERVED = (Path("/"), Path("/proc"), Path("/sys"), Path("/dev"), Path(CONTROL_DIR))


@dataclass(frozen=True)
class MountSpec:
    target: str
    kind: Literal["bind", "tmpfs"]
    read_only: bool
    source: str | None = None  # bind only
    why: str = ""
    exec_ok: bool = False  # tmpfs only: Docker mounts a tmpfs noexec unless told otherwise

    def describe(self) -> str:
        access = "ro" if self.read_only else "rw"
        what = f"bind {self.source}" if self.kind == "bind" else "tmpfs"
        return f"{self.target}: {what} ({access}){' - ' + self.why if self.why else ''}"


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
            "user": self.user,
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


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _highest_missing(path: Path, root: Path) -> Path:
    """The outermost missing ancestor of ``path`` strictly inside ``root``."""
    missing = path
    for parent in path.parents:
        if parent == root or not _under(parent, root) or parent.exists():
            break
        missing = parent
    return missing


def _pin_ancestors(mounts: dict[str, MountSpec], rw_roots: list[Path]) -> None:
    """Bind every directory between a writable root and a deeper mount onto itself.

    A mount point cannot be renamed (EBUSY), but the directories above it can,
    and the mount moves with them: ``mv sub sub2 && mkdir -p sub/.git/hooks``
    would leave the host a fresh, unprotected ``sub/.git`` where the protected
    one was, and a workspace bound inside a writable root could be moved aside
    the same way.  Pinned, none of them can.
    """
    for target in [Path(t) for t in list(mounts)]:
        root = next((r for r in rw_roots if target != r and _under(target, r)), None)
        if root is None:
            continue
        for parent in target.parents:
            if parent == root or not _under(parent, root):
                break
            key = str(parent)
            if key not in mounts and parent.is_dir() and not parent.is_symlink():
                mounts[key] = MountSpec(key, "bind", False, key, f"pin: keeps {target} from being renamed away")


def enclosing_repository(workspace: Path) -> list[Path]:
    """The work tree of the git repository the workspace lies in (strictly above
    it), and the git dirs its ``.git`` file points to outside it: bound
    read-only, so ``git status`` and ``git log`` work in a workspace that is a
    subdirectory of a checkout.  Never the home directory or a system
    directory (a dotfiles repository would put all of ``~`` in the container).
    """
    repo = core_enclosing_repository(workspace)
    if repo is not None:
        if repo.top in _RESERVED or system_dir_reason(repo.top) is not None:
            return []
        return list(repo.paths())
    # The workspace is a repository's top itself: only a git dir elsewhere is missing.
    return [d for d in git_dirs(workspace / ".git") if not _under(d, workspace)]


def global_git_config(policy: SandboxPolicy) -> Path | None:
    """The user's ``~/.gitconfig`` that ``GIT_CONFIG_GLOBAL`` names when the
    command has a sandbox HOME (``sandbox_home.home_env``): bound read-only so
    git finds the user's name and settings, as on the local runners."""
    if policy.home is None or policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        return None
    path = Path(os.path.expanduser("~")) / ".gitconfig"
    if not path.is_file() or any(_under(path, h) for h in policy.hidden_paths):
        return None
    return path


def container_env(env: dict[str, str], spec: ContainerSpec) -> dict[str, str]:
    """``env`` without a ``GIT_CONFIG_GLOBAL`` the container cannot read
    (git would then fail on it rather than fall back to HOME's)."""
    named = env.get("GIT_CONFIG_GLOBAL")
    if named is not None and not any(m.kind == "bind" and m.target == named for m in spec.mounts):
        env = {k: v for k, v in env.items() if k != "GIT_CONFIG_GLOBAL"}
    return env


def symlinked_protected(policy: SandboxPolicy, uid: int | None) -> list[Path]:
    """Protected paths inside a writable root reached through a symlink there: the
    target is bound read-only, but the link itself can be replaced (a bind
    cannot be placed on a symlink) unless the container's ``uid`` (``None``:
    a user name, unknown here) cannot touch it (``fixed_symlink``)."""
    if policy.mode is not SandboxMode.WORKSPACE_WRITE:
        return []
    roots = [policy.workspace, *policy.writable_roots]
    out: list[Path] = []
    for path in (*policy.protected_paths, *policy.read_only_paths):
        root = next((r for r in roots if path != r and _under(path, r)), None)
        if root is not None and os.path.realpath(path) != str(path) and os.path.lexists(path):
            if uid is None or not fixed_symlink(path, uid):
                out.append(path)
    return out


def build_spec(policy: SandboxPolicy, *, image: str, user: str, pids: int | None,
               memory: int | None, machine: str | None = None) -> ContainerSpec:
    mode = policy.mode
    writable = mode is not SandboxMode.READ_ONLY
    mounts: dict[str, MountSpec] = {
        CONTROL_DIR: MountSpec(CONTROL_DIR, "tmpfs", False, why="exec pid files for kill"),
        # Read-only means no writes anywhere, the container's own /tmp included.
        # Builds and test suites run what they write to /tmp, as on the host.
        str(PRIVATE_TMP): MountSpec("/tmp", "tmpfs", not writable, exec_ok=True,
                                    why="private, not the host's /tmp"),
    }
    roots: list[Path] = [policy.workspace]
    if writable:
        roots += [r for r in policy.writable_roots if r not in roots]
    elif policy.home is not None:
        roots.append(policy.home)  # HOME names it: visible, read-only like the workspace
    # Hidden wins over every other rule: nothing is bound at or below a hidden
    # path, or the bind would put its contents back on top of the mask.
    hidden = list(policy.hidden_paths) if mode is not SandboxMode.DANGER_FULL_ACCESS else []
    roots = [r for r in roots if not any(_under(r, h) for h in hidden)]
    rw_roots: list[Path] = []
    for root in roots:
        if root in _RESERVED:
            raise SandboxUnavailable(f"{root} cannot be bind-mounted into a container; "
                                     "remove it from the profile's writable roots", runner="docker")
        if root == PRIVATE_TMP:
            continue  # served by the container's private /tmp tmpfs
        if not root.exists():
            if root == policy.workspace:
                raise SandboxUnavailable(f"workspace {root} does not exist", runner="docker")
            continue
        if any(_under(root, other) for other in rw_roots):
            continue  # already visible through an enclosing writable root
        if writable:
            rw_roots.append(root)
        why = "workspace" if root == policy.workspace else "sandbox home" if root == policy.home else "writable root"
        mounts[str(root)] = MountSpec(str(root), "bind", not writable, str(root), why)
    for repo in enclosing_repository(policy.workspace):
        if str(repo) not in mounts and not any(_under(repo, h) for h in hidden) and repo.is_dir():
            # Read-only under the workspace's own (deeper, writable) bind.
            mounts[str(repo)] = MountSpec(str(repo), "bind", True, str(repo), "the enclosing git repository")
    config = global_git_config(policy)
    if config is not None and str(config) not in mounts:
        mounts[str(config)] = MountSpec(str(config), "bind", True, str(config),
                                        "GIT_CONFIG_GLOBAL: the user's git settings")
    placeholders: list[str] = []
    if mode is not SandboxMode.DANGER_FULL_ACCESS:
        for path in (*policy.protected_paths, *policy.read_only_paths):
            enclosing = next((r for r in rw_roots if _under(path, r)), None)
            if enclosing is None or any(_under(path, h) for h in hidden):
                continue  # read-only, hidden or invisible already
            target = path
            why = "protected path"
            if not path.exists():
                target = _highest_missing(path, enclosing)
                placeholders.append(str(target))
                why = f"protected path (missing: an empty read-only placeholder blocks {path.name})"
            mounts[str(target)] = MountSpec(str(target), "bind", True, str(target), why)
        for path in hidden:
            if not any(_under(path, Path(m.target)) for m in mounts.values() if m.kind == "bind"):
                continue  # not mounted at all: invisible
            if path.is_dir():
                mounts[str(path)] = MountSpec(str(path), "tmpfs", True, why="hidden (empty tmpfs)")
            elif path.exists():
                mounts[str(path)] = MountSpec(str(path), "bind", True, os.devnull, "hidden (/dev/null)")
        _pin_ancestors(mounts, rw_roots)
    limits = policy.limits
    full = mode is SandboxMode.DANGER_FULL_ACCESS
    return ContainerSpec(
        image=image,
        user=user,
        mounts=tuple(sorted(mounts.values(), key=lambda m: (m.target.count("/"), m.target))),
        network_mode="host" if policy.network or full else "none",
        read_only_root=not full,
        pids_limit=_with_own_processes(limits.max_processes if limits.max_processes is not None else pids),
        mem_limit=limits.max_memory_bytes if limits.max_memory_bytes is not None else memory,
        fsize_limit=limits.max_file_size_bytes,
        placeholders=tuple(sorted(set(placeholders))),
        syscall_machine=None if full else machine or platform.machine(),
    )


def mount_points_below(roots: list[str], mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Host mount points strictly inside ``roots`` (a ro bind does not make them ro)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
            points = [entry.point for entry in mount_table(fh.read())]
    except OSError:
        return []
    return sorted(p for p in points for r in roots if Path(r) in Path(p).parents)


#: What the container holds besides the command counts against its pids limit:
#: docker's init, the keep-alive's shell and its ``sleep`` (``pids.current`` is
#: 4 during a one-process exec).  Added to the limit, so the policy's
#: ``max_processes`` is the command's own, as on the other runners.
OWN_PROCESSES = 3
#: Each exec's setup (``runc init`` and the processes it clones) joins the
#: container's pids cgroup before the command replaces it: with no room for it
#: an exec under a small limit fails at random ("read init-p: connection reset
#: by peer": 2 in 40 with ``max_processes = 4``, none in 60 with 2 more).  Once
#: the command runs the room is free, so on docker a command may hold this
#: many processes beyond ``max_processes`` (the report says so).
EXEC_SETUP_PROCESSES = 3
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
