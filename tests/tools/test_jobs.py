"""Jobs through the tools and ``ctx.require(JobRegistry)`` with the real local executor."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from dsh.tools.jobs import JobRegistry

from tests.support.processes import pids_with
from tests.support.tools import assert_gone, bash, call, local_ctx, marker, parsed
from tests.support.wait import PATIENCE_S, wait_until


def test_foreground_outliving_the_wait_continues_as_its_job(workspace: Path) -> None:
    # The command cannot finish before the test creates `go`: no timing luck.
    command = "echo started; while [ ! -e go ]; do sleep 0.05; done; seq 1 3000; echo end"
    with local_ctx(workspace) as ctx:
        result = bash(ctx, command, timeout_ms=200)
        p = parsed(result)
        assert not result.is_error and p.running and p.job_id == result.job_id
        assert "continues in the background" in result.content
        job_id = result.job_id
        assert job_id is not None
        (workspace / "go").touch()
        jobs = cast(JobRegistry, ctx.require(JobRegistry))
        assert jobs.wait(job_id, "agent-a", PATIENCE_S)
        # Byte-exact completeness through the registry's consuming read.
        _, read = jobs.read(job_id, "agent-a")
        seen = p.body + "\n" + read.stdout
        assert seen == "started\n" + "".join(f"{i}\n" for i in range(1, 3001)) + "end\n"
        # Consuming: the next read through the tool has no new output, only the status.
        again = call(ctx, "job_output", {"job_id": job_id})
        assert again.content == f"[job {job_id} completed]"


def test_background_job_is_polled_to_completion(workspace: Path) -> None:
    command = "while [ ! -e go ]; do sleep 0.05; done; for i in $(seq 1 200); do echo line$i; done"
    with local_ctx(workspace) as ctx:
        started = bash(ctx, command, run_in_background=True)
        job_id = started.job_id
        assert job_id and parsed(started).running and parsed(started).body == ""
        first = parsed(call(ctx, "job_output", {"job_id": job_id}))
        assert first.running and first.body == ""
        (workspace / "go").touch()
        chunks: list[str] = []
        state = None
        while state != "completed":
            result = call(ctx, "job_output", {"job_id": job_id, "wait_ms": 2000})
            p = parsed(result)
            assert not result.is_error, result.content
            state = p.job_state
            if p.body:
                chunks.append(p.body)
        text = "\n".join(chunks)
        assert text.split("\n") == [f"line{i}" for i in range(1, 201)]
        assert p.exit_code == 0


def test_job_kill_leaves_no_process(workspace: Path) -> None:
    mark = marker()
    command = f"sleep 1000.{mark} & (sleep 1001.{mark} &) ; sleep 1002.{mark}; wait"
    with local_ctx(workspace) as ctx:
        job_id = bash(ctx, command, run_in_background=True).job_id
        assert job_id
        wait_until(lambda: len(pids_with(mark)) >= 3, what="the job's processes")
        result = call(ctx, "job_kill", {"job_id": job_id})
        p = parsed(result)
        assert not result.is_error and p.job_state == "killed" and p.signal is not None
        assert "stopped by job_kill" in result.content
        assert_gone(mark)
        # A second kill of the same id: the job was released with its final report.
        assert call(ctx, "job_kill", {"job_id": job_id}).is_error


def test_kill_of_a_finished_job_says_so(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        job_id = bash(ctx, "echo bye", run_in_background=True).job_id
        assert job_id
        assert cast(JobRegistry, ctx.require(JobRegistry)).wait(job_id, "agent-a", PATIENCE_S)
        result = call(ctx, "job_kill", {"job_id": job_id})
        assert "already finished" in result.content
        assert parsed(result).body == "bye" and parsed(result).exit_code == 0


def test_another_owner_is_refused(workspace: Path) -> None:
    mark = marker()
    with local_ctx(workspace) as ctx:
        job_id = bash(ctx, f"sleep 1000.{mark}", run_in_background=True, owner="alice").job_id
        assert job_id
        for tool in ("job_output", "job_kill"):
            refused = call(ctx, tool, {"job_id": job_id}, owner="mallory")
            assert refused.is_error and "belongs to another agent" in refused.content
        wait_until(lambda: bool(pids_with(mark)), what="job still running")
        assert not call(ctx, "job_kill", {"job_id": job_id}, owner="alice").is_error
        assert_gone(mark)


def test_unknown_job_id(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        result = call(ctx, "job_output", {"job_id": "job-999"})
        assert result.is_error and "no job 'job-999'" in result.content


def test_finished_jobs_are_reaped_after_the_configured_time(workspace: Path) -> None:
    with local_ctx(workspace, jobs={"reap_after_s": 0}) as ctx:
        # It cannot finish (and be reaped) before the test holds its handle.
        command = "while [ ! -e go ]; do sleep 0.05; done; echo hi"
        job_id = bash(ctx, command, run_in_background=True).job_id
        assert job_id
        jobs = cast(JobRegistry, ctx.require(JobRegistry))
        job = jobs.get(job_id, "agent-a")
        assert len(jobs) == 1  # running jobs are never reaped
        (workspace / "go").touch()
        assert job.execution.wait(PATIENCE_S)
        result = call(ctx, "job_output", {"job_id": job_id})
        assert result.is_error and "reaped" in result.content
        assert len(jobs) == 0
    with local_ctx(workspace, jobs={"reap_after_s": 3600}) as ctx:
        job_id = bash(ctx, "echo hi", run_in_background=True).job_id
        assert job_id
        assert cast(JobRegistry, ctx.require(JobRegistry)).wait(job_id, "agent-a", PATIENCE_S)
        first = call(ctx, "job_output", {"job_id": job_id})
        assert parsed(first).body == "hi" and parsed(first).job_state == "completed"
        assert not call(ctx, "job_output", {"job_id": job_id}).is_error  # still there


def test_cap_refuses_new_jobs_and_nothing_runs(workspace: Path) -> None:
    mark = marker()
    with local_ctx(workspace, jobs={"max_jobs": 2}) as ctx:
        ids = [
            bash(ctx, f"sleep 1000.{mark}", run_in_background=True).job_id for _ in range(2)
        ]
        assert all(ids)
        for extra in ({"run_in_background": True}, {}):
            refused = bash(ctx, "touch ran", **extra)
            assert refused.is_error and "too many jobs" in refused.content
        assert not (workspace / "ran").exists()
        assert not call(ctx, "job_kill", {"job_id": ids[0]}).is_error
        assert not bash(ctx, "touch ran").is_error  # a slot is free again
        assert (workspace / "ran").exists()


def test_foreground_that_finishes_does_not_keep_a_slot(workspace: Path) -> None:
    with local_ctx(workspace, jobs={"max_jobs": 1}) as ctx:
        for _ in range(3):
            assert bash(ctx, "true").content == ""
        assert len(cast(JobRegistry, ctx.require(JobRegistry))) == 0


def test_teardown_kills_every_job(workspace: Path) -> None:
    mark = marker()
    with local_ctx(workspace) as ctx:
        bash(ctx, f"sleep 1000.{mark}", run_in_background=True, owner="a")
        bash(ctx, f"sleep 1001.{mark} & wait", run_in_background=True, owner="b")
        outlived = bash(ctx, f"sleep 1002.{mark}", timeout_ms=100)
        assert parsed(outlived).running
        wait_until(lambda: len(pids_with(mark)) >= 3, what="all jobs running")
    assert_gone(mark)


def test_without_a_registry_the_executor_deadline_kills(workspace: Path) -> None:
    mark = marker()
    with local_ctx(workspace, with_jobs=False) as ctx:
        spec = call(ctx, "bash", {"command": "true", "description": "x"})
        assert not spec.is_error
        result = bash(ctx, f"sleep 1000.{mark}", timeout_ms=300)
        p = parsed(result)
        assert p.timed_out_ms == 300 and p.signal is not None
        refused = bash(ctx, "true", run_in_background=True)
        assert refused.is_error and "run_in_background" in refused.content
        assert [t for t in ("job_output", "job_kill") if not call(ctx, t, {"job_id": "x"}).is_error] == []
    assert_gone(mark)
