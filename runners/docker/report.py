"""What the docker runner reports: the parts of a policy a daemon cannot hold,
and the plan ``profile explain`` prints.  Pure: values in, text out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.runners.docker.spec import (
    EXEC_SETUP_PROCESSES,
    PIDS_OVERHEAD,
    ContainerSpec,
    mount_points_below,
)
from dsh.runners.linux.seccomp import FILE_RULES_TEXT
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Gap

# Docker reports an exec's end as one number: death by signal N and exit(128+N)
# look the same, so only the signals the runner sent itself are reported as such.
SECCOMP_LINE = ("seccomp (the shared rules, replacing Docker's default profile): keyrings, io_uring, "
                f"{FILE_RULES_TEXT} refused; sockets: IP and route netlink, socketpair() stream/seqpacket; "
                "socket(AF_UNIX) refused (a daemon socket bound into the workspace stays unreachable), "
                "AF_VSOCK and other netlink refused; no namespaces, mounts, bpf, perf, userfaultfd")

SIGNAL_STATUS_GAP = ("death by a signal the runner did not send shows as exit code 128+N "
                      "(docker reports no signal)")


def daemon_gaps(policy: SandboxPolicy, spec: ContainerSpec, *, user: str, info: Mapping[str, Any],
            local: bool) -> list[Gap]:
    """Each part of ``policy`` this daemon cannot hold."""
    gaps: list[Gap] = []
    if not policy.constrained:
        return gaps
    ro_roots = [m.target for m in spec.mounts if m.kind == "bind" and m.read_only]
    below = mount_points_below(ro_roots) if local else []
    if below:
        gaps.append(Gap("docker-ro-submounts", "host mounts inside read-only binds stay "
                     f"writable (daemon API < 1.44 has no recursive read-only): {below[:3]}"))
    gaps += spec.gaps
    if spec.seccomp_profile is None:
        gaps.append(Gap("docker-syscall-filter", f"no seccomp table for the daemon's machine "
                     f"{spec.syscall_machine}: keyrings, io_uring, AF_VSOCK, netlink and unix "
                     "sockets are only as Docker's default profile leaves them"))
    if info:
        if spec.mem_limit is not None and not info.get("MemoryLimit"):
            gaps.append(Gap("docker-memory-limit", "the daemon has no memory cgroup"))
        if spec.pids_limit is not None and not info.get("PidsLimit"):
            gaps.append(Gap("docker-pids-limit", "the daemon has no pids cgroup"))
    return gaps


def plan_lines(policy: SandboxPolicy, spec: ContainerSpec) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """The rules, the network and the limits of ``spec`` for ``policy``."""
    rules = [f"image {spec.image}; root filesystem "
             + ("read-only" if spec.read_only_root else "writable (danger-full-access)"),
             "only the mounts below exist; the rest of the host is invisible",
             "cap_drop=ALL, no-new-privileges, init process, user " + spec.user,
             "the container goes with this process: a keeper on the host removes it when the "
             "process ends, SIGKILL included; the next run reaps one whose keeper died too",
             *([SECCOMP_LINE] if spec.seccomp_profile else []),
             *(m.describe() for m in spec.mounts)]
    rules += [f"{p}: missing writable root, not mounted" for p in policy.missing_roots]
    network = ("host network (network_mode=host; no bridge is used)"
               if spec.network_mode == "host" else "none (network_mode=none: only lo)")
    limits = [f"pids {spec.pids_limit - PIDS_OVERHEAD} for the command, {EXEC_SETUP_PROCESSES} more once it "
              f"runs (container pids limit {spec.pids_limit}: docker's init and keep-alive count too, and "
              "each exec's setup needs room)"
              if spec.pids_limit else "pids: none",
              f"memory {spec.mem_limit} bytes (no extra swap)" if spec.mem_limit
              else "memory: none"]
    if spec.fsize_limit is not None:
        limits.append(f"file size {spec.fsize_limit} bytes (ulimit fsize)")
    if policy.limits.wall_time_s is not None:
        limits.append(f"wall time {policy.limits.wall_time_s}s (killed by the runner)")
    return tuple(rules), network, tuple(limits)


def fixed_gaps(policy: SandboxPolicy) -> list[str]:
    """What no daemon holds, whatever its features."""
    cannot = [SIGNAL_STATUS_GAP]
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        cannot.append("danger-full-access still sees only the mounts above, not the host")
    return cannot
