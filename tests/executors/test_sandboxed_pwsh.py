"""pwsh-sandbox with every runner: the wrapped argv ends with exactly
``pwsh -NoLogo -NoProfile -NonInteractive -Command <command>``; real runs
where ``pwsh`` is installed."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.process import LocalSubprocessService
from dsh.executors.sandboxed import SandboxPwshExecutor
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host import SandboxHost
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import LocalLaunch, RemoteLaunch

from tests.support.sandboxed import need_runner, sandbox_ctx

COMMAND = "Write-Output 'a b' \"$HOME\"; $x = 1; echo `$x\n# second line"
PWSH_ARGV = ("pwsh", "-NoLogo", "-NoProfile", "-NonInteractive", "-Command", COMMAND)
ALL_RUNNERS = ("landlock", "bwrap", "seatbelt", "docker", "e2b")
#: Runners whose launch argv can be inspected (E2B's is inside a closure).
INSPECTABLE = ("landlock", "bwrap", "seatbelt", "docker")


def wrapped_argv(launch: Any) -> tuple[Any, ...] | None:
    """The argv a launch will run, when the runner exposes it."""
    if isinstance(launch, LocalLaunch):
        return tuple(launch.argv)
    if isinstance(launch, RemoteLaunch) and isinstance(launch.start, functools.partial):
        for arg in launch.start.args:
            if isinstance(arg, (list, tuple)) and tuple(arg[-len(PWSH_ARGV):]) == PWSH_ARGV:
                return tuple(arg)
    return None


@pytest.mark.parametrize("runner", INSPECTABLE)
def test_wrapped_argv_ends_with_the_exact_pwsh_argv(workspace: Path, runner: str) -> None:
    need_runner(runner)
    with sandbox_ctx(workspace, runner=runner, mode="read-only", executor="pwsh-sandbox") as ctx:
        shell = ctx.require(ShellExecutor)
        assert isinstance(shell, SandboxPwshExecutor)
        assert shell.shell_argv(COMMAND) == PWSH_ARGV
        spec = shell.resolve(ShellExecRequest(command=COMMAND))
        env = ctx.require(LocalSubprocessService).build_env(shell.base_env(spec), spec.env, spec.dsh_env)
        launch = shell.prepare_launch(shell.shell_argv(COMMAND), spec, env)
        try:
            argv = wrapped_argv(launch)
            if argv is None:
                pytest.skip(f"SANDBOX_UNAVAILABLE: {runner} does not expose its launch argv (runs it remotely)")
            assert argv[-len(PWSH_ARGV):] == PWSH_ARGV
            if runner in ("landlock", "docker"):
                # No wrapper program: Landlock restricts the spawner thread,
                # Docker execs the argv itself inside the container.
                assert argv == PWSH_ARGV
            else:
                assert len(argv) > len(PWSH_ARGV)
        finally:
            if launch.cleanup is not None:
                launch.cleanup()


@pytest.fixture
def pwsh_shim(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``pwsh`` on PATH that prints the argv it received, NUL-separated.

    It lives in the workspace so the local runners and Docker (which binds the
    workspace at the same path) see it; the E2B double's emulated machine gets a
    copy on its own PATH (see ``_runner_setup``)."""
    bin_dir = workspace / ".shim-bin"
    bin_dir.mkdir()
    shim = bin_dir / "pwsh"
    shim.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return shim


def _runner_setup(runner: str, tmp_path: Path, shim: Path) -> tuple[dict[str, Any], tuple[str, ...], Any]:
    """Runner options, accepted degradations and a stop callable for ``runner``."""
    if runner != "e2b":
        need_runner(runner)
        return {}, (), None
    from tests.runners.e2b.envd_server import start_envd_server
    from tests.runners.e2b.machine import SHIMS

    root = tmp_path / "e2b-root"
    root.mkdir()
    url, stop = start_envd_server(root)
    # The remote machine has its own PATH: install the stand-in there, as a
    # template with pwsh would have it.
    remote = root / SHIMS.lstrip("/") / "pwsh"
    remote.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shim, remote)
    # Debug mode against the local envd double is partial by design.
    return {"sandbox_url": url}, ("e2b-debug",), stop


@pytest.mark.parametrize("runner", ALL_RUNNERS)
def test_pwsh_argv_reaches_the_program(
    workspace: Path, tmp_path: Path, pwsh_shim: Path, runner: str
) -> None:
    options, accept, stop = _runner_setup(runner, tmp_path, pwsh_shim)
    try:
        with sandbox_ctx(
            workspace, runner=runner, mode="read-only", executor="pwsh-sandbox",
            options=options, accept_degraded=accept,
        ) as ctx:
            spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=COMMAND, timeout_ms=120_000))
            result = ctx.require(ShellExecutor).execute(spec).result()
    finally:
        if stop is not None:
            stop()
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text.split("\0")[:-1] == list(PWSH_ARGV[1:])
    assert result.sandbox is not None and result.sandbox.runner == runner


def test_seatbelt_argv_on_this_machine(workspace: Path) -> None:
    # On Linux the host refuses seatbelt (fail closed) before any argv is built.
    with sandbox_ctx(workspace, runner="seatbelt", mode="read-only", executor="pwsh-sandbox") as ctx:
        if ctx.require(SandboxHost).probe("seatbelt").available:
            pytest.skip("SANDBOX_UNAVAILABLE: seatbelt is available here: covered by the per-runner test")
        spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=COMMAND))
        with pytest.raises(SandboxUnavailable):
            ctx.require(ShellExecutor).prepare_launch(ctx.require(ShellExecutor).shell_argv(COMMAND), spec, {})


@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_pwsh_runs_for_real(workspace: Path, runner: str) -> None:
    if shutil.which("pwsh") is None:
        pytest.skip("SANDBOX_UNAVAILABLE: pwsh is not installed here: only the argv is tested")
    need_runner(runner)
    with sandbox_ctx(workspace, runner=runner, mode="read-only", executor="pwsh-sandbox") as ctx:
        spec = ctx.require(ShellExecutor).resolve(
            ShellExecRequest(command="Write-Output 'a b'; Set-Content x.txt 1", timeout_ms=120_000)
        )
        result = ctx.require(ShellExecutor).execute(spec).result()
    assert result.stdout.text.startswith("a b\n")
    assert result.sandbox is not None and result.sandbox.mode is SandboxMode.READ_ONLY
    assert result.exit_code != 0 and result.sandbox.denied
    assert not (workspace / "x.txt").exists()


def test_pwsh_missing_is_a_clear_error(workspace: Path) -> None:
    if shutil.which("pwsh") is not None:
        pytest.skip("SANDBOX_UNAVAILABLE: pwsh is installed here (the not-found path cannot be shown)")
    need_runner("bwrap")
    with sandbox_ctx(workspace, runner="bwrap", mode="read-only", executor="pwsh-sandbox") as ctx:
        spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="Write-Output hi"))
        with pytest.raises(Exception) as info:
            ctx.require(ShellExecutor).execute(spec)
    assert getattr(info.value, "code", "") == "SHELL_NOT_FOUND"
