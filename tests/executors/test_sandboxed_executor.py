"""bash-sandbox through the real Landlock and bwrap runners: facts, denial,
fail-closed, unwrapped danger-full-access, exact argv, env narrowing."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.sandboxed import SandboxBashExecutor
from dsh.executors.seam import ShellExecRequest, ShellExecutor, ShellRunResult
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode

from tests.support.sandboxed import LINUX_RUNNERS, accept_for, need_runner, sandbox_ctx

TIMEOUT_MS = 60_000


@pytest.fixture(params=LINUX_RUNNERS)
def runner(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    need_runner(name)
    return name


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host-writable path outside every writable root (not /tmp); removed after."""
    path = Path("/var/tmp") / f"dsh-outside-{uuid.uuid4().hex}"
    yield path
    if path.exists():
        path.unlink()


def run(ctx: Any, command: str, **kw: Any) -> ShellRunResult:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=command, timeout_ms=TIMEOUT_MS, **kw))
    result: ShellRunResult = ctx.require(ShellExecutor).execute(spec).result()
    return result


def test_facts_on_every_result(workspace: Path, runner: str) -> None:
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        shell = ctx.require(ShellExecutor)
        assert isinstance(shell, SandboxBashExecutor)
        assert shell.sandbox_mode is SandboxMode.READ_ONLY and shell.constraining
        result = run(ctx, "echo hello")
    assert result.exit_code == 0 and result.stdout.text == "hello\n"
    facts = result.sandbox
    assert facts is not None
    assert facts.mode is SandboxMode.READ_ONLY
    assert facts.runner == runner
    assert facts.enforcement.startswith(("full", "partial"))
    assert not facts.denied and not facts.runner_failed and facts.runner_error is None


def test_write_outside_roots_is_denied(workspace: Path, runner: str, outside: Path) -> None:
    with sandbox_ctx(workspace, runner=runner, accept_degraded=accept_for(runner)) as ctx:
        result = run(ctx, f"echo x > {outside}")
        inside = run(ctx, "echo ok > inside.txt")
    assert result.exit_code not in (0, None)
    assert result.sandbox is not None and result.sandbox.denied
    assert not outside.exists()
    # the workspace itself is writable, and that is not a denial
    assert inside.exit_code == 0 and inside.sandbox is not None and not inside.sandbox.denied
    assert (workspace / "inside.txt").read_text() == "ok\n"


def test_read_only_denies_workspace_writes(workspace: Path, runner: str) -> None:
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        result = run(ctx, "touch new-file")
    assert result.exit_code not in (0, None)
    assert result.sandbox is not None and result.sandbox.denied
    assert not (workspace / "new-file").exists()


def test_false_positives(workspace: Path, runner: str) -> None:
    (workspace / "sandbox").mkdir()
    with sandbox_ctx(workspace, runner=runner, accept_degraded=accept_for(runner)) as ctx:
        cases = {
            "false": run(ctx, "false"),
            "sandbox in a path": run(ctx, "ls sandbox/missing"),
            "exit 0 with evidence": run(ctx, "echo 'bash: /etc/x: Permission denied' >&2"),
            "writable path": run(ctx, f"echo 'cat: {workspace}/f: Permission denied' >&2; exit 1"),
            "no path": run(ctx, "echo 'Permission denied (publickey).' >&2; exit 255"),
        }
    for name, result in cases.items():
        assert result.sandbox is not None, name
        assert not result.sandbox.denied, name
    assert cases["false"].exit_code == 1


def test_foreground_fails_closed_when_runner_unavailable(workspace: Path) -> None:
    marker = workspace / "ran"
    # seatbelt exists only on macOS: on Linux it is registered but unavailable.
    with sandbox_ctx(workspace, runner="seatbelt", mode="read-only") as ctx:
        spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=f"touch {marker}"))
        with pytest.raises(SandboxUnavailable) as info:
            ctx.require(ShellExecutor).execute(spec)
    assert info.value.code == "SANDBOX_UNAVAILABLE"
    assert not marker.exists()


def test_foreground_fails_closed_when_runner_refuses_profile(workspace: Path) -> None:
    need_runner("landlock")
    marker = workspace / "ran"
    # Landlock cannot keep .git read-only inside the workspace; the policy does
    # not accept that degradation, so the run is refused.
    with sandbox_ctx(workspace, runner="landlock") as ctx:
        spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=f"touch {marker}"))
        with pytest.raises(SandboxUnavailable) as info:
            ctx.require(ShellExecutor).execute(spec)
    assert "landlock-protected-paths" in str(info.value)
    assert not marker.exists()


def test_background_settles_with_runner_failed(workspace: Path) -> None:
    marker = workspace / "ran"
    with sandbox_ctx(workspace, runner="seatbelt", mode="read-only") as ctx:
        spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=f"touch {marker}", on_expiry="none"))
        execution = ctx.require(ShellExecutor).execute(spec)
        assert execution.wait(30)
        result = execution.result()
    assert execution.status == "killed"
    facts = result.sandbox
    assert facts is not None and facts.runner_failed
    assert facts.runner == "seatbelt" and facts.runner_error
    assert "SANDBOX_UNAVAILABLE" in facts.runner_error
    assert not facts.denied and facts.mode is SandboxMode.READ_ONLY
    assert not marker.exists()


def test_danger_full_access_runs_unwrapped(workspace: Path, outside: Path) -> None:
    # runner=seatbelt is unavailable here: proof that no runner is involved.
    with sandbox_ctx(workspace, runner="seatbelt", mode="danger-full-access") as ctx:
        result = run(ctx, f"grep NoNewPrivs /proc/self/status; echo x > {outside}")
    assert result.exit_code == 0, result.stderr.text
    assert result.stdout.text.split() == ["NoNewPrivs:", "0"]
    assert outside.read_text() == "x\n"
    assert result.sandbox is not None
    assert result.sandbox.mode is SandboxMode.DANGER_FULL_ACCESS
    assert result.sandbox.enforcement == "full" and result.sandbox.runner is None


def test_escalated_call_uses_the_requested_mode(workspace: Path, runner: str) -> None:
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        denied = run(ctx, "touch a")
        escalated = run(ctx, "touch b", sandbox_mode=SandboxMode.DANGER_FULL_ACCESS)
    assert denied.sandbox is not None and denied.sandbox.denied
    assert escalated.exit_code == 0
    assert escalated.sandbox is not None
    assert escalated.sandbox.mode is SandboxMode.DANGER_FULL_ACCESS
    assert (workspace / "b").exists() and not (workspace / "a").exists()


WEIRD_ARGS: tuple[str | bytes, ...] = (
    "a b",
    "'q'",
    '"dq"',
    "$HOME",
    "line1\nline2",
    "",
    "*",
    b"\xff\xfe-not-utf8",
)


def test_exact_argv_round_trips(workspace: Path, runner: str) -> None:
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        shell = ctx.require(ShellExecutor)
        spec = shell.resolve(
            ShellExecRequest(
                command="printf", argv=("printf", "<%s>\n", *WEIRD_ARGS), timeout_ms=TIMEOUT_MS
            )
        )
        execution = shell.execute(spec)
        result = execution.result()
        data, _ = execution.observed.read("stdout", 0)
    assert result.exit_code == 0, result.stderr.text
    expected = b"".join(
        b"<" + (a if isinstance(a, bytes) else a.encode()) + b">\n" for a in WEIRD_ARGS
    )
    assert data == expected


def test_env_is_narrowed_in_constrained_modes(
    workspace: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZZ_DSH_PLAIN", "inherited")
    script = 'echo "plain=${ZZ_DSH_PLAIN-unset} given=${ZZ_GIVEN-unset} path=${PATH:+set}"'
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        constrained = run(ctx, script, env={"ZZ_GIVEN": "yes"})
        unwrapped = run(ctx, script, sandbox_mode=SandboxMode.DANGER_FULL_ACCESS)
    assert constrained.stdout.text == "plain=unset given=yes path=set\n"
    assert unwrapped.stdout.text == "plain=inherited given=unset path=set\n"


def test_env_passthrough_from_profile(
    workspace: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", "/venv")
    monkeypatch.setenv("ZZ_DSH_PLAIN", "inherited")
    with sandbox_ctx(workspace, runner=runner, profile="python", mode="read-only") as ctx:
        result = run(ctx, 'echo "$VIRTUAL_ENV ${ZZ_DSH_PLAIN-unset}"')
    assert result.stdout.text == "/venv unset\n"


def test_host_stays_unrestricted(workspace: Path, runner: str, outside: Path) -> None:
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        run(ctx, "true")
        outside.write_text("host can still write\n")
    assert os.path.exists(outside)
