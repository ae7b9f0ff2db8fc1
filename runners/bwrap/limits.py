"""Resource limits around a bwrap sandbox: cgroups, rlimits and a wall clock.

- processes: a ``pids`` cgroup.  ``RLIMIT_NPROC`` is no substitute as root (the
  kernel ignores it for uid 0) and counts every process of the user otherwise,
  so it is only the fallback for non-root users without a writable cgroup.
- memory: a ``memory`` cgroup (whole sandbox, swap included where the kernel
  accounts it); without one, ``RLIMIT_AS`` per process is a named degradation.
- file size: ``RLIMIT_FSIZE`` (applies to root too), via ``prlimit``.
- wall time: coreutils ``timeout`` around bwrap; on expiry it sends SIGTERM to
  bwrap, whose ``--die-with-parent`` child then dies with the whole pid
  namespace; the command's exit status is 124.

The sandbox joins its cgroups before bwrap starts: a fixed ``/bin/sh`` script
writes its own pid into each ``cgroup.procs`` and then ``exec "$@"`` -- the
command's argv passes through ``"$@"`` unchanged, never re-joined.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")

#: Joins every cgroup named before ``--`` (exit 125 if one cannot be joined),
#: then execs the rest of argv exactly.
JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'

#: Processes bwrap itself keeps in the cgroup: its monitor and the pid-1 reaper.
BWRAP_OVERHEAD_PIDS = 2


@dataclass(frozen=True)
class CgroupSupport:
    """Where this process may create child cgroups, per controller."""

    version: int | None
    pids_parent: str | None = None
    memory_parent: str | None = None
    reason: str = ""  # why a controller is not usable, when one is not


def _own_paths() -> dict[str, str]:
    """Controller name (``""`` for the v2 hierarchy) -> this process's cgroup path."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


def _usable(parent: Path, limit_file: str) -> bool:
    """Can we create a child with ``limit_file`` here?  Tried once, then removed."""
    child = parent / f"dsh-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        child.mkdir()
    except OSError:
        return False
    try:
        return (child / limit_file).exists() and os.access(child / limit_file, os.W_OK)
    finally:
        with contextlib.suppress(OSError):
            child.rmdir()


def detect_cgroups() -> CgroupSupport:
    own = _own_paths()
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # unified (v2) hierarchy
        parent = CGROUP_ROOT / own.get("", "/").lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        pids = str(parent) if "pids" in enabled and _usable(parent, "pids.max") else None
        mem = str(parent) if "memory" in enabled and _usable(parent, "memory.max") else None
        why = "" if pids and mem else f"cgroup v2: {parent} delegates no pids/memory controller"
        return CgroupSupport(2, pids, mem, why)
    found: dict[str, str | None] = {}
    for ctrl, limit_file in (("pids", "pids.max"), ("memory", "memory.limit_in_bytes")):
        parent = CGROUP_ROOT / ctrl / own.get(ctrl, "/").lstrip("/")
        found[ctrl] = str(parent) if _usable(parent, limit_file) else None
    missing = [c for c, p in found.items() if p is None]
    why = f"cgroup v1: cannot create a {'/'.join(missing)} cgroup (not root?)" if missing else ""
    version = 1 if (CGROUP_ROOT / "pids").exists() or (CGROUP_ROOT / "memory").exists() else None
    return CgroupSupport(version, found["pids"], found["memory"], why if version else "no cgroups")


class SandboxCgroup:
    """The cgroup(s) of one sandboxed command; removed after it is reaped."""

    def __init__(self, dirs: list[Path], version: int) -> None:
        self.dirs = dirs
        self.version = version

    @classmethod
    def create(cls, support: CgroupSupport, *, pids_max: int | None, memory_max: int | None) -> SandboxCgroup:
        name = f"dsh-bwrap-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        version = support.version or 1
        wanted: list[tuple[str, list[tuple[str, int]]]] = []
        if version == 2:
            limits: list[tuple[str, int]] = []
            if pids_max is not None:
                limits.append(("pids.max", pids_max))
            if memory_max is not None:
                limits += [("memory.max", memory_max), ("memory.swap.max", 0)]
            parent = support.pids_parent or support.memory_parent
            assert parent is not None
            wanted.append((parent, limits))
        else:
            if pids_max is not None and support.pids_parent:
                wanted.append((support.pids_parent, [("pids.max", pids_max)]))
            if memory_max is not None and support.memory_parent:
                # memsw (memory + swap) must be >= the memory limit: set it second.
                mem = [("memory.limit_in_bytes", memory_max), ("memory.memsw.limit_in_bytes", memory_max)]
                wanted.append((support.memory_parent, mem))
        group = cls([], version)
        try:
            for parent, settings in wanted:
                path = Path(parent) / name
                path.mkdir()
                group.dirs.append(path)
                for fname, value in settings:
                    if fname == "memory.memsw.limit_in_bytes" or fname == "memory.swap.max":
                        if not (path / fname).exists():
                            continue  # swap not accounted here: memory alone is still capped
                    (path / fname).write_text(str(value))
        except BaseException:
            group.remove()
            raise
        return group

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
        return found

    def kill(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def remove(self, wait_s: float = 5.0) -> None:
        """Kill what is left and remove the directories (a dying task keeps one busy)."""
        deadline = time.monotonic() + wait_s
        for d in list(self.dirs):
            while True:
                self.kill(signal.SIGKILL)
                try:
                    d.rmdir()
                    self.dirs.remove(d)
                    break
                except FileNotFoundError:
                    self.dirs.remove(d)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # leave it; the next detect never reuses a name
                    time.sleep(0.05)


def rlimit_args(prlimit: str, *, nproc: int | None, address_space: int | None, file_size: int | None) -> list[str]:
    """``prlimit --X=N ... --`` (empty when no rlimit is needed)."""
    opts = []
    if nproc is not None:
        opts.append(f"--nproc={nproc}")
    if address_space is not None:
        opts.append(f"--as={address_space}")
    if file_size is not None:
        opts.append(f"--fsize={file_size}")
    return [prlimit, *opts, "--"] if opts else []


def timeout_args(timeout: str, wall_time_s: float | None) -> list[str]:
    if wall_time_s is None:
        return []
    return [timeout, "--kill-after=2", f"{wall_time_s:g}s"]


def join_args(shell: str, group: SandboxCgroup | None) -> list[str]:
    if group is None or not group.dirs:
        return []
    return [shell, "-c", JOIN_SCRIPT, "dsh-cgroup-join", *group.procs_files, "--"]
