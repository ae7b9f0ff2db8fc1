"""Jobs through the real Landlock and bwrap runners: a command that outlives
the tool's wait is polled to completion with its whole output; job_kill and
teardown leave no process behind (checked in /proc)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.processes import pids_with
from tests.support.sandboxed import LINUX_RUNNERS, accept_for, need_runner
from tests.support.tools import assert_gone, bash, call, marker, parsed, sandboxed_ctx
from tests.support.wait import wait_until


@pytest.fixture(params=LINUX_RUNNERS)
def runner(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    need_runner(name)
    return name


def test_outlived_wait_is_polled_to_completion(workspace: Path, runner: str) -> None:
    command = "echo begin; while [ ! -e go ]; do sleep 0.05; done; seq 1 500; echo end"
    with sandboxed_ctx(workspace, runner=runner, mode="workspace-write",
                       accept_degraded=accept_for(runner)) as ctx:
        first = bash(ctx, command, timeout_ms=300)
        p = parsed(first)
        assert p.running and first.job_id, first.content
        lines = p.body.split("\n") if p.body else []
        (workspace / "go").touch()
        state = "running"
        while state == "running":
            result = call(ctx, "job_output", {"job_id": first.job_id, "wait_ms": 5000})
            q = parsed(result)
            assert not result.is_error, result.content
            state = q.job_state or ""
            if q.body:
                lines.extend(q.body.split("\n"))
        assert state == "completed" and q.exit_code == 0
        assert lines == ["begin", *(str(i) for i in range(1, 501)), "end"]


def test_job_kill_leaves_no_process(workspace: Path, runner: str) -> None:
    mark = marker()
    command = f"sleep 1000.{mark} & (sleep 1001.{mark} &); sleep 1002.{mark}"
    with sandboxed_ctx(workspace, runner=runner, mode="read-only") as ctx:
        job_id = bash(ctx, command, run_in_background=True).job_id
        assert job_id
        wait_until(lambda: len(pids_with(mark)) >= 3, what="the job's processes")
        killed = call(ctx, "job_kill", {"job_id": job_id})
        assert parsed(killed).job_state == "killed", killed.content
        assert_gone(mark)


def test_teardown_kills_sandboxed_jobs(workspace: Path, runner: str) -> None:
    mark = marker()
    with sandboxed_ctx(workspace, runner=runner, mode="read-only") as ctx:
        bash(ctx, f"sleep 1000.{mark}", run_in_background=True)
        assert parsed(bash(ctx, f"sleep 1001.{mark}", timeout_ms=200)).running
        wait_until(lambda: len(pids_with(mark)) >= 2, what="both jobs running")
    assert_gone(mark)


def test_what_a_job_left_is_logged_when_the_session_closes(workspace: Path, runner: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A background job still running when the client goes (or whose end it
    never read) made a repository with a planted fsmonitor: the server's log
    says so when it closes the session, as the job's trailer would have."""
    planted = "git init -q sub && git -C sub config core.fsmonitor 'touch /tmp/pwned'"
    config = workspace / "sub" / ".git" / "config"
    with caplog.at_level(logging.WARNING, logger="dsh.tools"):
        with sandboxed_ctx(workspace, runner=runner, mode="workspace-write",
                           accept_degraded=accept_for(runner)) as ctx:
            bash(ctx, f"{planted} && sleep 1000", run_in_background=True)
            wait_until(lambda: b"fsmonitor" in (config.read_bytes() if config.exists() else b""),
                       what="the repository made")
    said = [r.getMessage() for r in caplog.records if r.name == "dsh.tools"]
    assert any(str(config) in m and "created or changed" in m for m in said), said
