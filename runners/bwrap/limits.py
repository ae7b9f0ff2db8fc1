"""Resource limits around a bwrap sandbox: cgroups, rlimits and a wall clock.

- processes: a ``pids`` cgroup.  ``RLIMIT_NPROC`` is no substitute as root (the
  kernel ignores it for uid 0) and counts every process of the user otherwise,
  so it is only the fallback for non-root users without a writable cgroup.
- memory: a ``memory`` cgroup (whole sandbox, swap included where the kernel
  accounts it); without one, ``RLIMIT_AS`` per process is a named degradation.
- file size: ``RLIMIT_FSIZE`` (applies to root too), via ``prlimit``.
- wall time: coreutils ``timeout`` around bwrap; on expiry it sends SIGTERM to
  bwrap, whose ``--die-with-parent`` child then dies with the whole pid
  namespace; the command's exit status is 124.  ``timeout`` forks bwrap, so it
  runs under ``setpriv --pdeathsig KILL``: if the supervisor dies, ``timeout``
  dies with it and bwrap's ``--die-with-parent`` ends the sandbox.

The cgroups come from ``dsh.runners.linux.cgroups`` (v1 or v2).  The sandbox
joins them before bwrap starts (``JOIN_SCRIPT`` writes into ``cgroup.procs``
fds opened by the supervisor, then ``exec "$@"``: the argv passes unchanged).
Inside, ``/sys`` is read-only and the cgroup namespace hides the paths: the
command cannot leave.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsh.runners.linux.cgroups import CgroupSession, no_cgroup_reason

#: Processes bwrap itself keeps in the cgroup: its monitor and the pid-1 reaper.
BWRAP_OVERHEAD_PIDS = 2


@dataclass(frozen=True)
class CgroupSupport:
    """Which limits the runner's cgroup session can hold (a summary for planning)."""

    version: int | None
    pids_parent: str | None = None
    memory_parent: str | None = None
    reason: str = ""  # why a controller is not usable, when one is not


def cgroup_support(session: CgroupSession | None) -> CgroupSupport:
    if session is None or not session.holds:
        return CgroupSupport(None, reason=no_cgroup_reason())
    pids, memory = session.version_of("pids"), session.version_of("memory")
    missing = [name for name, v in (("pids", pids), ("memory", memory)) if v is None]
    why = f"no writable {'/'.join(missing)} cgroup (session: {session.describe()})" if missing else ""
    return CgroupSupport(
        pids or memory or max(h.version for h, _ in session.dirs.values()),
        session.describe() if pids else None,
        session.describe() if memory else None,
        why,
    )


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


def timeout_args(timeout: str, wall_time_s: float | None, setpriv: str | None) -> list[str]:
    if wall_time_s is None:
        return []
    orphan_guard = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    return [*orphan_guard, timeout, "--kill-after=2", f"{wall_time_s:g}s"]
