"""bash-local and pwsh-local: resolve() defaults, caps and bad input; the pwsh argv."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.executors.local import LocalBashExecutor, LocalPwshExecutor
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.context import Context, build_context
from dsh.sandbox.errors import CompositionError, ShellNotFoundError, UsageError, WorkdirError

from tests.support.executors import make_context, run


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    context = make_context(tmp_path)
    yield context
    context.close()


def test_resolve_fills_every_default(ctx: Context, tmp_path: Path) -> None:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true"))
    assert spec.workdir == str(tmp_path)
    assert (spec.timeout_ms, spec.on_expiry, spec.max_output_bytes, spec.stdout_max_bytes) == (
        120000,
        "kill",
        64000,
        64000,
    )
    assert (spec.max_spill_bytes, spec.grace_ms) == (64 * 1024 * 1024, 3000)
    assert spec.timeout_capped is False and spec.requested_timeout_ms is None
    assert spec.dsh_env["DSH_HOME"]  # the managed snapshot is stamped on the spec
    assert spec.argv is None


def test_relative_workdir_is_under_the_configured_cwd(ctx: Context, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    result = run(ctx, "pwd", workdir="sub")
    assert result.stdout.text.strip() == str(tmp_path / "sub")


def test_huge_timeout_is_capped_and_the_cap_reported(ctx: Context) -> None:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", timeout_ms=10**12))
    assert spec.timeout_ms == 600000 and spec.timeout_capped and spec.requested_timeout_ms == 10**12
    assert run(ctx, "true", timeout_ms=10**12).timeout_ms == 600000


@pytest.mark.parametrize("timeout", [0, -1, -120000])
def test_zero_or_negative_timeout_is_a_usage_error(ctx: Context, timeout: int) -> None:
    with pytest.raises(UsageError, match="timeout_ms must be a positive number"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", timeout_ms=timeout))


def test_non_integer_timeout_is_a_usage_error(ctx: Context) -> None:
    with pytest.raises(UsageError, match="timeout_ms must be a whole number"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", timeout_ms="10"))  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["", "   ", "\n\t"])
def test_empty_command_is_a_usage_error(ctx: Context, command: str) -> None:
    with pytest.raises(UsageError, match="command is empty"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command=command))


def test_empty_argv_is_a_usage_error(ctx: Context) -> None:
    with pytest.raises(UsageError, match="argv is empty"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="", argv=()))


def test_bad_on_expiry_and_output_cap(ctx: Context) -> None:
    with pytest.raises(UsageError, match="on_expiry"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", on_expiry="later"))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="stdout_max_bytes"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", stdout_max_bytes=0))


def test_missing_workdir_names_the_path(ctx: Context, tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist"
    with pytest.raises(WorkdirError, match=r"does-not-exist.*does not exist") as info:
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", workdir=str(missing)))
    assert info.value.code == "WORKDIR_INVALID"
    assert isinstance(info.value, UsageError)


def test_non_directory_workdir_names_the_path(ctx: Context, tmp_path: Path) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("x")
    with pytest.raises(WorkdirError, match=r"a-file.*is not a directory"):
        ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", workdir=str(afile)))


def test_workdir_removed_between_resolve_and_execute(ctx: Context, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true", workdir=str(gone)))
    gone.rmdir()
    with pytest.raises(WorkdirError, match="gone"):
        ctx.require(ShellExecutor).execute(spec)


def test_configured_cwd_missing(tmp_path: Path) -> None:
    context = make_context(tmp_path / "nope")
    try:
        with pytest.raises(WorkdirError, match="nope"):
            context.require(ShellExecutor).resolve(ShellExecRequest(command="true"))
    finally:
        context.close()


def test_bad_config_names_the_entry_and_field(tmp_path: Path) -> None:
    with pytest.raises(CompositionError, match=r"'shell'.*timeout_ms"):
        build_context([{"id": "shell", "name": "bash-local", "config": {"timeout_ms": "soon"}}])
    with pytest.raises(CompositionError, match=r"'shell'.*grace_ms must be a positive"):
        build_context([{"id": "shell", "name": "bash-local", "config": {"grace_ms": 0}}])
    with pytest.raises(CompositionError, match="unknown config field 'timeout'"):
        build_context([{"id": "shell", "name": "bash-local", "config": {"timeout": 5}}])


def test_shell_argv_is_the_one_place_the_argv_is_built(ctx: Context) -> None:
    assert ctx.require(ShellExecutor).shell_argv("echo 'a b' $x") == ("bash", "-c", "echo 'a b' $x")
    assert isinstance(ctx.require(ShellExecutor), LocalBashExecutor) and ctx.require(ShellExecutor).shell_kind == "bash"


def test_missing_shell_binary_is_a_clear_error(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ShellNotFoundError, match="bash is not installed"):
        ctx.require(ShellExecutor).execute(spec)


@pytest.fixture
def pwsh(tmp_path: Path) -> Iterator[Context]:
    context = make_context(tmp_path, name="pwsh-local")
    yield context
    context.close()


def test_pwsh_argv(pwsh: Context) -> None:
    shell = pwsh.require(ShellExecutor)
    assert isinstance(shell, LocalPwshExecutor) and shell.shell_kind == "pwsh"
    assert shell.shell_argv("Get-Date; 'a b'") == (
        "pwsh",
        "-NoLogo",
        "-NoProfile",
        "-NonInteractive",
        "-Command",
        "Get-Date; 'a b'",
    )


@pytest.mark.skipif(shutil.which("pwsh") is not None, reason="SANDBOX_UNAVAILABLE: pwsh is installed here")
def test_pwsh_missing_says_so(pwsh: Context) -> None:
    with pytest.raises(ShellNotFoundError, match="pwsh is not installed") as info:
        run(pwsh, "Write-Output hi")
    assert info.value.code == "SHELL_NOT_FOUND"


@pytest.mark.skipif(shutil.which("pwsh") is None, reason="SANDBOX_UNAVAILABLE: pwsh is not installed")
def test_pwsh_runs_for_real(pwsh: Context) -> None:
    result = run(pwsh, "Write-Output 'a b'; exit 3")
    assert (result.exit_code, result.stdout.text.strip()) == (3, "a b")
