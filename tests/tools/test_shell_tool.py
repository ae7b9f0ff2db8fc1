"""The ``bash``/``pwsh`` tool itself (``tools/shell_tool.py``): what it tells the
model, which arguments it offers, and what each kind of call returns."""

from __future__ import annotations

from pathlib import Path

from dsh.executors.seam import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, SandboxFacts, ShellExecutor
from dsh.sandbox.context import build_context
from dsh.sandbox.modes import SandboxMode
from dsh.tools.shell_tool import BASH, PWSH, ShellTool, _runner_failure, timeout_bounds

from tests.support.tools import assert_gone, call, local_ctx, marker

TOOL = ShellTool(BASH)


def test_the_tool_needs_its_own_dialects_executor(tmp_path: Path) -> None:
    with local_ctx(tmp_path) as ctx:
        assert TOOL.available(ctx) and not ShellTool(PWSH).available(ctx)
        result = ShellTool(PWSH).run(ctx, {"command": "true"}, "agent-a")
        assert result.is_error and result.content == "the pwsh tool is not available here (no pwsh executor)."
    ctx = build_context([{"name": "jobs"}])
    try:
        assert not TOOL.available(ctx)
        try:
            TOOL.spec(ctx)
        except LookupError as exc:
            assert str(exc) == "the bash tool needs a bash executor mounted (ShellExecutor)"
        else:
            raise AssertionError("a spec without an executor")
    finally:
        ctx.close()


def test_timeout_bounds_come_from_the_executor(tmp_path: Path) -> None:
    entries = [{"name": "bash-local", "config": {"cwd": str(tmp_path), "timeout_ms": 2000, "max_timeout_ms": 5000}}]
    ctx = build_context(entries)
    try:
        assert timeout_bounds(ctx.require(ShellExecutor)) == (2000, 5000)
        spec = TOOL.spec(ctx)
        assert spec.parameters["properties"]["timeout_ms"]["maximum"] == 5000
        assert "`timeout_ms` (default 2000, at most 5000)" in spec.description
    finally:
        ctx.close()
    with local_ctx(tmp_path) as ctx:
        assert timeout_bounds(ctx.require(ShellExecutor)) == (DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)


def test_without_jobs_the_model_is_told_a_late_command_is_killed(tmp_path: Path) -> None:
    with local_ctx(tmp_path, with_jobs=False) as ctx:
        spec = TOOL.spec(ctx)
        assert "run_in_background" not in spec.parameters["properties"]
        assert "is killed and the result says `[timed out after Nms]`" in spec.description
        assert "background job" not in spec.description
        assert set(spec.parameters["required"]) == {"command", "description"}
        result = TOOL.run(ctx, {"command": "true", "run_in_background": True}, "agent-a")
        assert result.is_error
        assert result.content == "run_in_background needs a job registry (JobRegistry); none is mounted."
        mark = marker()
        result = TOOL.run(ctx, {"command": f"exec -a sleep-{mark} sleep 1000", "timeout_ms": 300}, "agent-a")
        assert not result.is_error and result.job_id is None
        assert result.content == "[timed out after 300ms]\n[killed by signal: SIGTERM]", result.content
        assert_gone(f"sleep-{mark}")


def test_with_jobs_a_late_command_keeps_running_as_its_job(tmp_path: Path) -> None:
    with local_ctx(tmp_path) as ctx:
        spec = TOOL.spec(ctx)
        assert "run_in_background" in spec.parameters["properties"]
        assert "keeps running as a background job" in spec.description
        mark = marker()
        result = TOOL.run(ctx, {"command": f"echo up; exec -a sleep-{mark} sleep 1000", "timeout_ms": 300}, "agent-a")
        assert result.job_id is not None and not result.is_error
        assert f"still running after 300ms and continues in the background; job_output with job_id {result.job_id}" \
            in result.content, result.content
        killed = call(ctx, "job_kill", {"job_id": result.job_id})
        assert not killed.is_error, killed.content
        assert_gone(f"sleep-{mark}")


def test_run_in_background_returns_the_job_at_once(tmp_path: Path) -> None:
    with local_ctx(tmp_path) as ctx:
        mark = marker()
        result = TOOL.run(ctx, {"command": f"exec -a sleep-{mark} sleep 1000", "run_in_background": True}, "agent-a")
        assert result.job_id is not None
        assert result.content == (
            f"[job {result.job_id} running: started in the background; job_output with job_id {result.job_id} "
            "reads its output, job_kill stops it]"
        )
        # Owned by the caller: another owner cannot stop it.
        assert call(ctx, "job_kill", {"job_id": result.job_id}, owner="agent-b").is_error
        assert not call(ctx, "job_kill", {"job_id": result.job_id}).is_error
        assert_gone(f"sleep-{mark}")


def test_a_finished_command_is_its_rendered_result(tmp_path: Path) -> None:
    with local_ctx(tmp_path) as ctx:
        result = TOOL.run(ctx, {"command": "echo out; echo err >&2; exit 3"}, "agent-a")
        assert (result.content, result.is_error, result.job_id) == ("out\nerr\n[exit code: 3]", False, None)


def test_a_local_executor_offers_no_escalation(tmp_path: Path) -> None:
    with local_ctx(tmp_path) as ctx:
        props = TOOL.spec(ctx).parameters["properties"]
        assert "sandbox_permissions" not in props and "justification" not in props
        assert "sandbox" not in TOOL.spec(ctx).description


def test_a_runner_failure_is_an_error_that_says_nothing_ran() -> None:
    mode = SandboxMode.READ_ONLY
    assert _runner_failure(None) is None
    assert _runner_failure(SandboxFacts(mode)) is None
    assert _runner_failure(SandboxFacts(mode, runner_failed=True)) == (
        "SANDBOX_UNAVAILABLE: the sandbox runner failed. The command was not run."
    )
    facts = SandboxFacts(mode, runner_failed=True, runner_error="SANDBOX_UNAVAILABLE: toy: daemon down")
    assert _runner_failure(facts) == "SANDBOX_UNAVAILABLE: toy: daemon down. The command was not run."
