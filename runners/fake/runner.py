"""The fake runner itself; see the package docstring for what it is (and is not) for."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from dsh.sandbox.capability import Capability
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import (
    Enforcement,
    ExitStatus,
    Gap,
    Launch,
    LocalLaunch,
    RemoteLaunch,
    RemoteProcess,
    Runner,
    RunnerPlan,
    RunnerProbe,
)

OnRun = Literal["record", "host"]


@dataclass(frozen=True)
class Call:
    """One ``prepare`` the fake answered: the exact argv and the policy it came with."""

    argv: tuple[str | bytes, ...]
    mode: str
    cwd: str


class FakeProcess(RemoteProcess):
    """A process that never started: canned output on pipes, a canned exit status."""

    def __init__(self, stdout: bytes, stderr: bytes, exit_code: int) -> None:
        self.stdout_fd, out_w = os.pipe()
        self.stderr_fd, err_w = os.pipe()
        for fd, data in ((out_w, stdout), (err_w, stderr)):
            with os.fdopen(fd, "wb") as pipe:  # small canned data: fits the pipe buffer
                pipe.write(data)
        self.status = ExitStatus(exit_code)
        self.signals: list[int] = []

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        return self.status

    def kill(self, sig: int) -> None:
        self.signals.append(sig)


class FakeRunner(Runner):
    """A runner double.  Every fact a real runner probes is a constructor argument.

    - ``available`` / ``reason``: what ``probe`` answers.
    - ``gaps``: mode value (``"read-only"``...) -> (degradation, reason) pairs
      it reports as partial enforcement; other modes are enforced fully.
    - ``degradations``: degradation name -> capabilities (declared names).
    - ``remote``, ``auto_priority``: the declarations the host reads.
    - ``on_run``: ``"record"`` (default) returns ``stdout``/``stderr``/``exit_code``
      from a process that never ran; ``"host"`` runs the argv unwrapped, which
      is allowed only for a policy that is not constrained (danger-full-access).
    """

    DEGRADATIONS: ClassVar[Mapping[str, tuple[Capability, ...]]] = {}

    def __init__(
        self,
        name: str = "fake",
        *,
        available: bool = True,
        reason: str | None = None,
        gaps: Mapping[str, Sequence[tuple[str, str]]] | None = None,
        degradations: Mapping[str, tuple[Capability, ...]] | None = None,
        remote: bool = False,
        auto_priority: int | None = None,
        on_run: OnRun = "record",
        stdout: bytes = b"",
        stderr: bytes = b"",
        exit_code: int = 0,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(options)
        # Instance attributes shadow the class declarations, so one test can
        # build several differently-declared fakes.
        self.name = name  # type: ignore[misc]
        self.remote = remote  # type: ignore[misc]
        self.auto_priority = auto_priority  # type: ignore[misc]
        self.DEGRADATIONS = dict(degradations or {})  # type: ignore[misc]
        self.DEGRADATION_NAMES = tuple(self.DEGRADATIONS)  # type: ignore[misc]
        self.available = available
        self.reason = reason if not available else None
        self.gaps = {mode: tuple(Gap(d, why) for d, why in pairs) for mode, pairs in (gaps or {}).items()}
        self.on_run = on_run
        self.canned = (stdout, stderr, exit_code)
        self.calls: list[Call] = []
        self.probes = 0
        self.closed = False
        self._lock = threading.Lock()

    def detect(self) -> RunnerProbe:
        self.probes += 1
        return RunnerProbe(self.name, self.available, self.reason or (None if self.available else "fake: off"),
                           "fake (enforces nothing)")

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        gaps = self.gaps.get(policy.mode.value, ())
        return Enforcement.partial(gaps) if gaps and policy.constrained else Enforcement.full()

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        return RunnerPlan(self.name, policy.mode, ("fake: enforces nothing",), "unchanged", (),
                          tuple(g.reason for g in self.gaps.get(policy.mode.value, ())))

    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> Launch:
        exact = argv
        with self._lock:
            self.calls.append(Call(exact, policy.mode.value, cwd))
        if self.on_run == "host":
            if policy.constrained:
                # Running it here would be running it unsandboxed: refuse instead.
                raise SandboxUnavailable(f"the fake runner enforces nothing; it cannot run {policy.mode}",
                                         runner=self.name)
            return LocalLaunch(argv=exact)
        stdout, stderr, code = self.canned
        return RemoteLaunch(start=lambda _stdin, _deadline: FakeProcess(stdout, stderr, code))

    def close(self) -> None:
        self.closed = True
