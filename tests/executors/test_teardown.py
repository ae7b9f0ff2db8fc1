"""No zombie, no orphan: group kills, double forks, SIGTERM-ignorers, executor death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.context import Context

from tests.support.executors import first_line_int, group_members, make_context, proc_stat, start, wait_group_gone
from tests.support.wait import PATIENCE_S, wait_until


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    context = make_context(tmp_path, grace_ms=300)
    yield context
    context.close()


def test_timeout_kills_the_whole_group(ctx: Context) -> None:
    # The pid is printed only after both children are forked, so the group is complete when it is read.
    execution = start(ctx, "sleep 1000 & sleep 1000 & echo $$; wait", on_expiry="kill", timeout_ms=2500)
    pgid = first_line_int(execution)
    assert len(group_members(pgid)) >= 3
    result = execution.result(timeout=PATIENCE_S)
    assert result.timed_out and not result.aborted
    assert result.exit_code is None and result.signal in ("SIGTERM", "SIGKILL")
    wait_group_gone(pgid)


def test_double_fork_is_killed_when_the_command_exits(ctx: Context) -> None:
    # The grandchild is re-parented away from the command and keeps stdout open.
    # The leader exits only once the grandchild is running (it wrote to the FIFO).
    execution = start(ctx, "echo $$; mkfifo up; ( ( sleep 1000 & echo up > up ) & ); read _ < up; echo leader-done")
    pgid = first_line_int(execution)
    result = execution.result(timeout=PATIENCE_S)
    assert result.exit_code == 0
    assert result.stdout.text.endswith("leader-done\n")
    wait_group_gone(pgid)  # no orphan and no zombie left


def test_double_fork_is_killed_on_kill(ctx: Context) -> None:
    execution = start(ctx, "echo $$; ( ( sleep 1000 & ) & ); ( ( sleep 1000 & ) & ); sleep 1000")
    pgid = first_line_int(execution)
    wait_until(lambda: len(group_members(pgid)) >= 3)
    assert execution.kill() is True
    assert execution.wait(PATIENCE_S)
    assert execution.status == "killed"
    wait_group_gone(pgid)


def test_sigterm_ignoring_command_gets_sigkill_after_grace(ctx: Context) -> None:
    execution = start(ctx, "trap '' TERM; echo $$; sleep 1000 & wait; sleep 1000")
    pgid = first_line_int(execution)
    assert execution.kill() is True
    result = execution.result(timeout=PATIENCE_S)
    assert result.signal == "SIGKILL"
    assert execution.status == "killed"
    wait_group_gone(pgid)


def test_sigterm_ignoring_child_of_an_obedient_leader(ctx: Context) -> None:
    # The leader dies at SIGTERM; its child ignores SIGTERM and must still go.
    execution = start(ctx, "echo $$; bash -c \"trap '' TERM; sleep 1000\" & wait")
    pgid = first_line_int(execution)
    wait_until(lambda: len(group_members(pgid)) >= 2)
    execution.kill()
    result = execution.result(timeout=PATIENCE_S)
    assert result.signal == "SIGTERM"
    wait_group_gone(pgid)


def test_kill_is_idempotent_and_false_once_done(ctx: Context) -> None:
    execution = start(ctx, "sleep 1000")
    assert execution.kill() is True
    assert execution.kill() is True  # still stopping: same answer, no second kill
    assert execution.wait(PATIENCE_S)
    assert execution.kill() is False
    assert execution.done
    finished = start(ctx, "true")
    assert finished.wait(PATIENCE_S)
    assert finished.kill() is False
    assert finished.status == "completed"


def test_context_close_kills_and_waits_for_everything(tmp_path: Path) -> None:
    context = make_context(tmp_path, grace_ms=300)
    runs = [start(context, "echo $$; trap '' TERM; sleep 1000 & wait") for _ in range(3)]
    pgids = [first_line_int(r) for r in runs]
    context.close()
    for execution, pgid in zip(runs, pgids, strict=True):
        assert execution.done  # close() waited
        assert execution.status == "killed"
        assert group_members(pgid) == []


EXECUTOR = textwrap.dedent(
    """
    import sys, time
    from dsh.sandbox.context import build_context
    from dsh.executors.seam import ShellExecRequest, ShellExecutor
    ctx = build_context([{"id": "b", "name": "bash-local", "config": {"cwd": sys.argv[1]}}])
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(
        command="echo $$; ( ( trap '' TERM; sleep 1000 & ) & ); sleep 1000", on_expiry="none"))
    execution = ctx.require(ShellExecutor).execute(spec)
    while b"\\n" not in execution.observed.read("stdout", 0)[0]:
        time.sleep(0.01)
    sys.stdout.write(execution.observed.read("stdout", 0)[0].decode())
    sys.stdout.flush()
    time.sleep(1000)
    """
)


def test_executor_sigkill_does_not_leave_the_command_running(tmp_path: Path) -> None:
    executor = subprocess.Popen([sys.executable, "-P", "-c", EXECUTOR, str(tmp_path)], stdout=subprocess.PIPE,
                                text=True)
    try:
        assert executor.stdout is not None
        pgid = int(executor.stdout.readline())
        wait_until(lambda: len(group_members(pgid, include_zombies=False)) >= 2)
        os.kill(executor.pid, signal.SIGKILL)
        executor.wait()
        # Killed processes whose parent is gone may stay zombies when PID 1 does
        # not reap (as in this VM); what matters is that nothing still runs.
        wait_group_gone(pgid, include_zombies=False)
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.wait()


def test_descendant_that_left_the_group_is_killed_and_reaped(ctx: Context) -> None:
    # setsid puts the child in a new session: a group kill cannot reach it.
    execution = start(ctx, "setsid sleep 1000 & echo $!; sleep 1000")
    escaped = first_line_int(execution)
    # Wait until it really is outside the command's group (its own session).
    wait_until(lambda: (proc_stat(escaped) or ("", 0, 0))[2] == escaped)
    assert execution.kill()
    assert execution.wait(PATIENCE_S)
    wait_group_gone(escaped)  # killed, and reaped: not even a zombie
