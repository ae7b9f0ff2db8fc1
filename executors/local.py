"""Local (unsandboxed) shell executors: ``bash-local`` and ``pwsh-local``.

``resolve()`` is the only place defaults and caps apply.  ``execute()`` builds
the spawn argv in one overridable place (``shell_argv``), lets a subclass wrap
it (``prepare_launch``, called inside the deadline) and hands the launch to
``ctx.require(LocalSubprocessService)``.  The sandbox executors subclass these and override
``prepare_launch``, ``sandbox_facts``, ``failed_facts`` and ``base_env``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsh.executors.execution import LocalShellExecution
from dsh.executors.process import LocalSubprocessService, describe_error
from dsh.executors.pty_launch import relay_argv
from dsh.executors.seam import (
    DEFAULT_TIMEOUT_MS,
    GRACE_MS,
    MAX_OUTPUT_BYTES,
    MAX_SPILL_BYTES,
    MAX_TIMEOUT_MS,
    SandboxFacts,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecution,
    ShellExecutor,
)
from dsh.executors.shell_env import ShellEnvRegistry
from dsh.sandbox.context import Service
from dsh.sandbox.errors import SandboxChanged, SandboxUnavailable, ShellNotFoundError, UsageError, WorkdirError
from dsh.sandbox.runner import Launch, LocalLaunch, exec_failure_status

#: How often a command is planned when the host changed under its sandbox's
#: setup (``SandboxChanged``: nothing ran); each plan sees the host as it is.
PLAN_ATTEMPTS = 3


@dataclass(frozen=True)
class LocalShellConfig:
    cwd: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_timeout_ms: int = MAX_TIMEOUT_MS
    max_output_bytes: int = MAX_OUTPUT_BYTES
    max_spill_bytes: int = MAX_SPILL_BYTES
    grace_ms: int = GRACE_MS
    #: Variables set for every command (a request's ``env`` wins over them).
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("timeout_ms", "max_timeout_ms", "max_output_bytes", "grace_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.max_spill_bytes < 0:
            raise ValueError(f"max_spill_bytes must be >= 0, got {self.max_spill_bytes}")


class LocalBashExecutor(ShellExecutor):
    """``bash -c <command>`` in a fresh process per call (plugin ``bash-local``)."""

    Config: ClassVar[type[Any]] = LocalShellConfig
    requires: ClassVar[tuple[type[Service], ...]] = (LocalSubprocessService, ShellEnvRegistry)
    shell_kind: ClassVar[str] = "bash"
    #: The binary ``shell_argv`` runs; checked on PATH before each run.
    shell_binary: ClassVar[str] = "bash"

    config: LocalShellConfig

    @property
    def subprocess(self) -> LocalSubprocessService:
        return self.ctx.require(LocalSubprocessService)

    # -- the overridable seam -------------------------------------------------------
    def shell_argv(self, command: str) -> tuple[str, ...]:
        return ("bash", "-c", command)

    def prepare_launch(self, argv: tuple[str | bytes, ...], spec: ShellExecSpec, env: Mapping[str, str]) -> Launch:
        return LocalLaunch(argv=argv)

    def terminal_argv(self, argv: tuple[str | bytes, ...], spec: ShellExecSpec) -> tuple[str | bytes, ...]:
        """The argv of a terminal session: the relay that allocates the pty and runs ``argv`` on it."""
        assert spec.terminal is not None
        return relay_argv(self.relay_python(), spec.terminal, argv)

    def relay_python(self) -> str:
        """The interpreter that runs the terminal relay where the command runs."""
        return os.path.realpath(sys.executable)

    def sandbox_facts(
        self,
        spec: ShellExecSpec,
        exit_code: int | None,
        signal: str | None,
        stdout: str,
        stderr: str,
    ) -> SandboxFacts | None:
        """The run's ``SandboxFacts`` (None for an unsandboxed executor)."""
        return None

    def failed_facts(self, spec: ShellExecSpec, error: SandboxUnavailable) -> SandboxFacts | None:
        """Facts for a background run whose runner failed (``runner_failed``)."""
        return None

    def base_env(self, spec: ShellExecSpec) -> dict[str, str]:
        """The inherited environment after scrubbing, before layering."""
        return self.subprocess.scrubbed_environ()

    def require_shell(self, argv: tuple[str | bytes, ...], env: Mapping[str, str]) -> None:
        """Raise ``ShellNotFoundError`` when the shell is missing here.

        Runners that run the shell elsewhere (a container) may override this.
        """
        if shutil.which(self.shell_binary, path=env.get("PATH", os.defpath)) is None:
            raise ShellNotFoundError(
                f"{self.shell_binary} is not installed (not found on PATH); "
                f"install it or use an executor for another shell"
            )

    # -- resolve ----------------------------------------------------------------------
    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        cfg = self.config
        if request.argv is not None:
            if not request.argv:
                raise UsageError("argv is empty: give the program to run and its arguments")
        elif not isinstance(request.command, str) or not request.command.strip():
            raise UsageError("command is empty: give the shell command to run")
        workdir = self._resolve_workdir(request.workdir)
        requested = request.timeout_ms
        timeout_ms = cfg.timeout_ms if requested is None else _positive(requested, "timeout_ms")
        capped = timeout_ms > cfg.max_timeout_ms
        if capped:
            timeout_ms = cfg.max_timeout_ms
        on_expiry = request.on_expiry or "kill"
        if on_expiry not in ("kill", "none"):
            raise UsageError(f"on_expiry must be 'kill' or 'none', got {on_expiry!r}")
        stdout_max = cfg.max_output_bytes
        if request.stdout_max_bytes is not None:
            stdout_max = _positive(request.stdout_max_bytes, "stdout_max_bytes")
        return ShellExecSpec(
            command=request.command,
            workdir=workdir,
            timeout_ms=timeout_ms,
            on_expiry=on_expiry,
            max_output_bytes=cfg.max_output_bytes,
            stdout_max_bytes=stdout_max,
            max_spill_bytes=cfg.max_spill_bytes,
            grace_ms=cfg.grace_ms,
            signal=request.signal,
            stdin=request.stdin,
            env={**cfg.env, **(request.env or {})},
            dsh_env=self._managed_env(request.dsh_env),
            requested_timeout_ms=requested,
            timeout_capped=capped,
            argv=tuple(request.argv) if request.argv is not None else None,
            terminal=request.terminal,
            merge_output=request.merge_output,
        )

    def default_workdir(self) -> str:
        """Where a request without ``workdir`` runs: the configured ``cwd``, else here."""
        return self.config.cwd or os.getcwd()

    def _resolve_workdir(self, workdir: str | None) -> str:
        base = self.default_workdir()
        path = os.path.abspath(os.path.join(base, os.path.expanduser(workdir)) if workdir else base)
        _check_workdir(path)
        return path

    def _managed_env(self, requested: Mapping[str, str] | None) -> dict[str, str]:
        # The trusted snapshot: managed facts win over anything the caller passes.
        registry = self.ctx.get(ShellEnvRegistry)
        managed = registry.collect() if registry is not None else {}
        return {**(requested or {}), **managed}

    # -- execute ----------------------------------------------------------------------
    def execute(self, spec: ShellExecSpec) -> ShellExecution:
        # The deadline starts here: preparation counts against it.
        started = time.monotonic()
        deadline = started + spec.timeout_ms / 1000 if spec.on_expiry == "kill" else None
        service = self.subprocess
        _check_workdir(spec.workdir)
        argv = spec.argv if spec.argv is not None else self.shell_argv(spec.command)
        env = service.build_env(self.base_env(spec), spec.env, spec.dsh_env)
        if spec.argv is None:
            self.require_shell(argv, env)
        if spec.terminal is not None:
            argv = self.terminal_argv(argv, spec)
        stdout = service.capture("stdout", max_bytes=spec.stdout_max_bytes, max_spill_bytes=spec.max_spill_bytes)
        stderr = service.capture("stderr", max_bytes=spec.max_output_bytes, max_spill_bytes=spec.max_spill_bytes)

        def facts(exit_code: int | None, sig: str | None, out: str, err: str) -> SandboxFacts | None:
            return self.sandbox_facts(spec, exit_code, sig, out, err)

        execution = LocalShellExecution(spec, stdout=stdout, stderr=stderr, deadline=deadline, facts=facts)
        for attempt in range(1, PLAN_ATTEMPTS + 1):
            try:
                launch = self.prepare_launch(argv, spec, env)
            except BaseException as exc:
                # Foreground: fail closed, nothing ran.  Background: a settled handle
                # that carries runner_failed.
                if not isinstance(exc, SandboxUnavailable) or spec.on_expiry == "kill":
                    execution.discard()
                    raise
                execution.spawn_failed(exc.reason, facts=self.failed_facts(spec, exc))
                return execution
            if deadline is not None and time.monotonic() >= deadline:
                _cleanup(launch)
                if execution.stop_before_start("timeout"):
                    execution.settle(None, None)
                    return execution
            if execution.cause is not None:  # aborted during preparation
                _cleanup(launch)
                execution.settle(None, None)
                return execution
            try:
                pump = service.spawn(
                    launch,
                    cwd=spec.workdir,
                    env=env,
                    stdin=spec.stdin,
                    stdout=stdout,
                    stderr=stderr,
                    grace_ms=spec.grace_ms,
                    deadline=deadline,
                    on_deadline=execution.on_deadline,
                    on_exit=execution.on_exit,
                    merge=spec.merge_output,
                )
            except SandboxUnavailable as exc:
                if isinstance(exc, SandboxChanged) and attempt < PLAN_ATTEMPTS:
                    continue  # nothing ran: plan again from the host as it is now
                if spec.on_expiry == "kill":
                    execution.discard()
                    raise
                execution.spawn_failed(exc.reason, facts=self.failed_facts(spec, exc))
                return execution
            except Exception as exc:  # a failed spawn is a settled handle, not an error
                failed = _exec_failure(exc, argv[0])
                if failed is not None:
                    execution.exec_failed(*failed)
                else:
                    execution.spawn_failed(describe_error(exc))
                return execution
            break
        execution.attach(pump)
        return execution


class LocalPwshExecutor(LocalBashExecutor):
    """``pwsh -NoLogo -NoProfile -NonInteractive -Command <command>`` (``pwsh-local``)."""

    shell_kind: ClassVar[str] = "pwsh"
    shell_binary: ClassVar[str] = "pwsh"

    def shell_argv(self, command: str) -> tuple[str, ...]:
        return ("pwsh", "-NoLogo", "-NoProfile", "-NonInteractive", "-Command", command)


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number, got {value!r}")
    if value <= 0:
        raise UsageError(f"{name} must be a positive number, got {value}; pass a value above 0")
    return value


def _check_workdir(path: str) -> None:
    if not os.path.exists(path):
        raise WorkdirError(f"workdir {path!r} does not exist; create it or pass an existing directory")
    if not os.path.isdir(path):
        raise WorkdirError(f"workdir {path!r} is not a directory; pass a directory")


def _cleanup(launch: Launch) -> None:
    if launch.cleanup is not None:
        launch.cleanup()


def _exec_failure(exc: BaseException, program: str | bytes) -> tuple[int, str] | None:
    """``(exit status, message)`` when ``execve`` of ``program`` itself failed,
    as a shell reports it; ``None`` for any other spawn failure (e.g. the
    working directory vanished), which is not the command's status."""
    if not isinstance(exc, OSError) or exc.errno is None or exc.filename is None:
        return None
    if os.fsencode(exc.filename) != os.fsencode(program):
        return None
    name = os.fsdecode(program)
    code = exec_failure_status(exc.errno)
    if code == 127 and "/" not in name:
        return code, f"dsh-sandbox: {name}: command not found\n"
    return code, f"dsh-sandbox: {name}: {os.strerror(exc.errno)}\n"
