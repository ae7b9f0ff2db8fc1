"""``SeatbeltRunner``: enforce a ``SandboxPolicy`` on macOS with ``sandbox-exec``.

The command runs as ``/usr/bin/sandbox-exec -p PROFILE -DKEY=VALUE... -- ARGV``
(argv exactly as given).  The profile comes from ``profile.build_profile``.
Resource limits are not enforced here (macOS has no cgroups, ``RLIMIT_AS`` is
not enforced by its kernel): each requested limit is a named degradation that
a profile must accept, or the run is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

from dsh.runners.seatbelt.profile import _SAFE_NAME, build_profile, protected_names
from dsh.sandbox import capability as cap
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import (
    Enforcement,
    Gap,
    Launch,
    LocalLaunch,
    Runner,
    RunnerPlan,
    RunnerProbe,
)

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
_TRIAL_TIMEOUT_S = 60


def limit_gaps(limits: ResourceLimits) -> list[Gap]:
    why = "not enforced by the Seatbelt runner (macOS has no cgroups)"
    asked = [
        ("seatbelt-limit-processes", limits.max_processes, "process limit"),
        ("seatbelt-limit-memory", limits.max_memory_bytes, "memory limit"),
        ("seatbelt-limit-file-size", limits.max_file_size_bytes, "file size limit"),
        ("seatbelt-limit-wall-time", limits.wall_time_s, "wall time limit"),
    ]
    return [Gap(name, f"{label} {value}: {why}") for name, value, label in asked if value is not None]


class SeatbeltRunner(Runner):
    name = "seatbelt"
    auto_priority: ClassVar[int | None] = 30
    terminal_pty = "host"  # one /dev for everyone: the session's pty is opened by the host
    DEGRADATIONS: ClassVar[Mapping[str, tuple[cap.Capability, ...]]] = {
        "seatbelt-limit-file-size": (cap.LIMITS_FILE_SIZE,),
        "seatbelt-limit-memory": (cap.LIMITS_MEMORY,),
        "seatbelt-limit-processes": (cap.LIMITS_PROCESSES,),
        "seatbelt-limit-wall-time": (cap.LIMITS_WALL_TIME,),
        "seatbelt-protected-rename": (cap.PROTECTED_PATHS,),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.sandbox_exec = str(self.options.get("sandbox_exec", SANDBOX_EXEC))

    def detect(self) -> RunnerProbe:
        if sys.platform != "darwin":
            return RunnerProbe(self.name, False, f"sandbox-exec is macOS only (platform {sys.platform})")
        if not os.access(self.sandbox_exec, os.X_OK):
            return RunnerProbe(self.name, False, f"{self.sandbox_exec} not found or not executable")
        trial = [self.sandbox_exec, "-p", "(version 1)\n(allow default)\n", "--", "/usr/bin/true"]
        try:
            done = subprocess.run(trial, capture_output=True, text=True, timeout=_TRIAL_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return RunnerProbe(self.name, False, f"{self.sandbox_exec} cannot run: {exc}")
        if done.returncode != 0:
            err = done.stderr.strip() or f"exit {done.returncode}"
            return RunnerProbe(self.name, False, f"sandbox-exec refused a trivial profile: {err}")
        return RunnerProbe(self.name, True, version="seatbelt (sandbox-exec)")

    # -- enforcement --------------------------------------------------------------------
    def _gaps(self, policy: SandboxPolicy) -> list[Gap]:
        gaps = limit_gaps(policy.limits)
        unsafe = [n for n in protected_names(policy) if not _SAFE_NAME.match(n)]
        if unsafe:
            gaps.append(
                Gap(
                    "seatbelt-protected-rename",
                    f"protected names {unsafe} have characters outside [A-Za-z0-9._-]: no name "
                    "rule, so a copy moved by renaming its parent directory is not protected",
                )
            )
        return gaps

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        if not policy.constrained:
            return Enforcement.full()
        gaps = self._gaps(policy)
        if not gaps:
            return Enforcement.full()
        return Enforcement.partial(gaps)

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        probe = self.probe()
        cannot = list(self.enforcement(policy).missing)
        if not probe.available:
            cannot.insert(0, f"seatbelt unavailable: {probe.reason}")
        limits = tuple(g.reason for g in limit_gaps(policy.limits))
        if not policy.constrained:
            return RunnerPlan(
                self.name, policy.mode, ("no sandbox: command runs as is",), "on: host network", limits, tuple(cannot)
            )
        profile = build_profile(policy)
        rules = [ln for ln in profile.text.splitlines() if ln.strip() and not ln.startswith(";")]
        rules += [f"param {key} = {value}" for key, value in profile.params]
        network = "on: (allow network*)" if policy.network else "off: (deny network*)"
        return RunnerPlan(self.name, policy.mode, tuple(rules), network, limits, tuple(cannot))

    # -- launch --------------------------------------------------------------------------
    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> Launch:
        if not policy.constrained:
            return LocalLaunch(argv=argv)
        return LocalLaunch(argv=wrap_argv(self.sandbox_exec, policy, argv))


def wrap_argv(sandbox_exec: str, policy: SandboxPolicy, command: tuple[str | bytes, ...]) -> tuple[str | bytes, ...]:
    """``sandbox-exec -p PROFILE -DKEY=VALUE... -- ARGV`` (argv untouched)."""
    profile = build_profile(policy)
    return (sandbox_exec, "-p", profile.text, *profile.define_args(), "--", *command)
