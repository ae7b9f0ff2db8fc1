"""What bwrap needs from this host, found once per runner: bwrap and unshare,
whether it runs as root, the cgroups it can limit with, the kernel parts to
mask, the syscall filter; and the bwrap arguments and limit gaps that follow.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from dsh.runners.bwrap import probe_cache
from dsh.runners.bwrap.filter import SyscallFilter, build_filter
from dsh.runners.bwrap.init_reaper import read_ready, reap_init, sandbox_init
from dsh.runners.bwrap.kernel import KernelCover, kernel_cover
from dsh.runners.bwrap.limits import (
    CgroupSupport,
    cgroup_support,
)
from dsh.runners.linux.cgroups import CgroupSession
from dsh.runners.linux.chroot import chroot_reason
from dsh.sandbox.errors import process_limit_hint
from dsh.sandbox.helper_env import helper_env
from dsh.sandbox.host_tools import system_tool
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.runner import (
    Gap,
)

INSTALL_HINT = "install it: apt-get install bubblewrap (or dnf install bubblewrap)"
_PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class HostFacts:
    """What the probe learned about this machine (cached per runner)."""

    bwrap: str | None
    version: str | None
    works: bool
    reason: str | None
    is_root: bool
    cgroups: CgroupSupport
    prlimit: str | None
    timeout: str | None
    kernel: KernelCover
    syscalls: SyscallFilter
    setpriv: str | None
    unshare: str | None = None


def snapshot_args(unshare: str, *, is_root: bool) -> list[str]:
    """Run bwrap in a private copy of the host's mount table.

    bwrap binds ``/`` recursively into a namespace that stays a slave of the
    host's: a host mount that comes or goes during setup makes its read-only
    remount fail (the run dies before the command starts), and one that appears
    later under a shared mount propagates in with the host's flags, writable
    inside a read-only sandbox.  A private copy taken first, in one syscall,
    receives nothing from the host afterwards.  Unprivileged, the copy needs a
    user namespace of its own, mapping the caller to itself.
    """
    args = [unshare, "--mount", "--propagation", "private"]
    if not is_root:
        args += ["--user", "--map-current-user"]
    return args


def namespace_args(*, network: bool, is_root: bool) -> list[str]:
    args = ["--unshare-user", "--disable-userns"]
    if is_root:
        args += ["--cap-drop", "ALL"]
    args += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if not network:
        args.append("--unshare-net")
    return args


BASE_MOUNTS = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]


def _run_with(argv: list[str], *pass_fds: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        pass_fds=pass_fds,
        env=helper_env(),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=_PROBE_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def probe_host(bwrap_option: str | None, session: CgroupSession | None, *, remembered: bool = True) -> HostFacts:
    """What bwrap and this kernel allow, found by a trial sandbox; with
    ``remembered``, a trial that worked under the same key is not run again
    (``probe_cache``)."""
    is_root = os.geteuid() == 0
    # Never the caller's PATH: a planted ``$WS/.venv/bin/unshare`` would run as the caller.
    bwrap = system_tool(bwrap_option or "bwrap")
    facts: dict[str, Any] = dict(
        is_root=is_root,
        cgroups=cgroup_support(session),
        prlimit=system_tool("prlimit"),
        timeout=system_tool("timeout"),
        kernel=kernel_cover(),
        syscalls=build_filter(),
        setpriv=system_tool("setpriv"),
        unshare=system_tool("unshare"),
    )
    if bwrap is None:
        return HostFacts(None, None, False, f"bwrap not found; {INSTALL_HINT}", **facts)
    if facts["unshare"] is None:
        why = "unshare not found (it gives bwrap a private mount table); install util-linux"
        return HostFacts(bwrap, None, False, why, **facts)
    snapshot = snapshot_args(facts["unshare"], is_root=is_root)
    true = system_tool("true") or "/bin/true"
    isolation = [*namespace_args(network=False, is_root=is_root), *BASE_MOUNTS, *facts["kernel"].args]
    key = _trial_key([*snapshot, bwrap, *isolation, true], [bwrap, facts["unshare"], true], facts["syscalls"])
    if remembered and key is not None and (kept := probe_cache.remembered(key)) is not None:
        return HostFacts(bwrap, kept or None, True, None, **facts)
    asked: subprocess.Popen[str] | None = None
    try:
        # Asked while the trial sandbox runs: each is a process start of its own.
        asked = subprocess.Popen([bwrap, "--version"], env=helper_env(), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace")
        info_read, info_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            isolation += ["--info-fd", str(info_write)]
            if facts["syscalls"].memfd is not None:
                trial_fd = facts["syscalls"].open_for_launch()
                try:
                    trial = _run_with([*snapshot, bwrap, *isolation, "--seccomp", str(trial_fd), true],
                                      trial_fd, info_write)
                finally:
                    os.close(trial_fd)
            else:
                trial = _run_with([*snapshot, bwrap, *isolation, true], info_write)
            os.close(info_write)
            info_write = -1
            # Its pid 1 may outlive the monitor and come back to this process.
            if (init := sandbox_init(read_ready(info_read))) is not None:
                reap_init(*init)
        finally:
            os.close(info_read)
            if info_write != -1:
                os.close(info_write)
        version = _version(asked)
    except (OSError, subprocess.SubprocessError) as exc:
        return HostFacts(bwrap, None, False, f"{bwrap} cannot be run: {exc}{process_limit_hint(str(exc))}", **facts)
    finally:
        if asked is not None and asked.poll() is None:
            asked.kill()
            asked.wait()
    if trial.returncode != 0:
        err = trial.stderr.strip() or f"exit {trial.returncode}"
        limited = process_limit_hint(err)
        chrooted = chroot_reason() if "namespace" in err and not limited else None
        reason = (
            f"bwrap cannot create a sandbox here: {err}{limited}"
            if limited
            else f"bwrap cannot create a sandbox here: {err} ({chrooted})"
            if chrooted
            else f"bwrap cannot create a sandbox here: {err} (user namespaces blocked? check "
            "sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces and AppArmor's "
            "apparmor_restrict_unprivileged_userns; bubblewrap >= 0.8 is needed for "
            "--disable-userns)"
        )
        return HostFacts(bwrap, version, False, reason, **facts)
    if key is not None:
        probe_cache.remember(key, version)
    return HostFacts(bwrap, version, True, None, **facts)


def _trial_key(argv: list[str], programs: list[str], syscalls: SyscallFilter) -> str | None:
    """``probe_cache.trial_key`` for this trial, or None when it cannot be told."""
    fd = syscalls.open_for_launch() if syscalls.memfd is not None else None
    try:
        return probe_cache.trial_key(argv, programs, fd)
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)


def _version(asked: subprocess.Popen[str]) -> str | None:
    out, _err = asked.communicate(timeout=_PROBE_TIMEOUT_S)
    return out.strip() or None


def limit_gaps(limits: ResourceLimits, facts: HostFacts) -> list[Gap]:
    gaps: list[Gap] = []
    cg = facts.cgroups
    if limits.max_processes is not None and cg.pids_parent is None:
        if facts.is_root or facts.prlimit is None:
            why = "RLIMIT_NPROC does not apply to root" if facts.is_root else "prlimit missing"
            gaps.append(
                Gap(
                    "bwrap-limit-processes",
                    f"process limit {limits.max_processes}: no pids cgroup ({cg.reason}) and {why}",
                )
            )
    # Without a memory cgroup (a normal login session has none delegated) the
    # limit is RLIMIT_AS per process: weaker, and said (``limitations``:
    # address-space; ``explain``), but no refusal, as on landlock: a built-in
    # profile must run for a normal user.
    if limits.max_memory_bytes is not None and cg.memory_parent is None and facts.prlimit is None:
        gaps.append(Gap("bwrap-limit-memory", "memory limit: no memory cgroup, no prlimit"))
    if limits.max_file_size_bytes is not None and facts.prlimit is None:
        gaps.append(Gap("bwrap-limit-file-size", "file size limit: prlimit (util-linux) missing"))
    if limits.wall_time_s is not None and facts.timeout is None:
        gaps.append(Gap("bwrap-limit-wall-time", "wall time limit: timeout (coreutils) missing"))
    elif limits.wall_time_s is not None and facts.setpriv is None:
        gaps.append(
            Gap(
                "bwrap-wall-time-orphan",
                "with a wall time limit, timeout(1) is bwrap's parent and would outlive a killed supervisor "
                "(so would the sandbox): setpriv (util-linux) is missing to tie it to the supervisor",
            )
        )
    return gaps


def limit_lines(limits: ResourceLimits, facts: HostFacts) -> list[str]:
    cg = facts.cgroups
    lines: list[str] = []
    if limits.max_processes is not None:
        how = (
            f"pids cgroup v{cg.version} (pids.max = limit + bwrap's own processes)"
            if cg.pids_parent
            else "RLIMIT_NPROC (counts all of this user's processes)"
        )
        lines.append(f"processes <= {limits.max_processes}: {how}")
    if limits.max_memory_bytes is not None:
        how = (
            f"memory cgroup v{cg.version}, whole sandbox"
            if cg.memory_parent
            else f"RLIMIT_AS per process, not the whole sandbox (no memory cgroup: {cg.reason})"
        )
        lines.append(f"memory <= {limits.max_memory_bytes} bytes: {how}")
    if limits.max_file_size_bytes is not None:
        lines.append(f"file size <= {limits.max_file_size_bytes} bytes: RLIMIT_FSIZE")
    if limits.wall_time_s is not None:
        lines.append(f"wall time <= {limits.wall_time_s:g} s: timeout(1), exit status 124")
    return lines
