"""The execution handle: results, deadlines, abort, reads, spawn failures."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pytest
from dsh.executors.local import LocalBashExecutor
from dsh.executors.seam import AbortSignal, SandboxFacts, ShellExecRequest, ShellExecSpec, ShellExecutor
from dsh.sandbox.context import Context, Planned, mount_all
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import Launch, LocalLaunch

from tests.support.executors import make_context, run, start
from tests.support.wait import PATIENCE_S, wait_until


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    context = make_context(tmp_path, grace_ms=500)
    yield context
    context.close()


def test_exit_codes_and_streams_are_results(ctx: Context) -> None:
    result = run(ctx, "echo out; echo err >&2; exit 7")
    assert (result.exit_code, result.signal, result.timed_out, result.aborted) == (7, None, False, False)
    assert result.stdout.text == "out\n" and result.stderr.text == "err\n"
    assert result.timeout_ms == 120000
    assert result.sandbox is None


def test_on_expiry_none_has_no_deadline(ctx: Context) -> None:
    execution = start(ctx, "sleep 1; echo ok", timeout_ms=1)
    result = execution.result(timeout=PATIENCE_S)
    assert result.exit_code == 0 and not result.timed_out
    assert result.stdout.text == "ok\n"


def test_abort_stops_the_command(ctx: Context) -> None:
    signal = AbortSignal()
    execution = start(ctx, "echo started; sleep 1000", signal=signal, on_expiry="kill")
    wait_until(lambda: b"started" in execution.observed.read("stdout")[0])
    signal.abort()
    result = execution.result(timeout=PATIENCE_S)
    assert result.aborted and not result.timed_out
    assert execution.status == "killed"
    assert result.stdout.text == "started\n"


def test_first_cause_wins_timeout_then_abort(ctx: Context) -> None:
    # The command ignores SIGTERM, so the abort lands while the timeout kill is
    # still in its grace period: the timeout stays the cause.
    signal = AbortSignal()
    execution = start(ctx, "trap '' TERM; echo $$; sleep 1000", signal=signal, on_expiry="kill", timeout_ms=200)
    wait_until(lambda: execution.status != "running" or _cause(execution) == "timeout")
    signal.abort()
    result = execution.result(timeout=PATIENCE_S)
    assert result.timed_out and not result.aborted


def test_first_cause_wins_abort_then_timeout(ctx: Context) -> None:
    signal = AbortSignal()
    execution = start(ctx, "trap '' TERM; sleep 1000", signal=signal, on_expiry="kill", timeout_ms=1500)
    signal.abort()  # before the deadline; the grace period outlasts the deadline
    result = execution.result(timeout=PATIENCE_S)
    assert result.aborted and not result.timed_out


def test_timeout_and_abort_racing_are_mutually_exclusive(ctx: Context) -> None:
    for delay_ms in (5, 10, 20, 40):
        signal = AbortSignal()
        execution = start(ctx, "sleep 1000", signal=signal, on_expiry="kill", timeout_ms=delay_ms)
        threading.Timer(delay_ms / 1000, signal.abort).start()
        result = execution.result(timeout=PATIENCE_S)
        assert result.timed_out != result.aborted  # exactly one cause, whichever came first


def test_aborted_before_start_never_runs(ctx: Context, tmp_path: Path) -> None:
    signal = AbortSignal()
    signal.abort()
    result = run(ctx, "touch ran", signal=signal)
    assert result.aborted and not result.timed_out
    assert not (tmp_path / "ran").exists()


class SlowPrepareExecutor(LocalBashExecutor):
    """Preparation (a runner's setup) that takes longer than the deadline."""

    prepare_s: ClassVar[float] = 1.0

    def prepare_launch(self, argv: tuple[str | bytes, ...], spec: ShellExecSpec, env: Mapping[str, str]) -> Launch:
        time.sleep(self.prepare_s)
        return LocalLaunch(argv=argv)


def _mount(tmp_path: Path, executor: type[LocalBashExecutor], **config: object) -> Context:
    cfg = LocalBashExecutor.Config(cwd=str(tmp_path), **config)
    return mount_all([Planned(executor, cfg, "shell")])


def test_preparation_time_counts_against_the_deadline(tmp_path: Path) -> None:
    context = _mount(tmp_path, SlowPrepareExecutor)
    try:
        result = run(context, "touch ran; echo hi", timeout_ms=200)
        assert result.timed_out and not result.aborted
        assert result.exit_code is None and result.stdout.text == "" and result.stderr.text == ""
        assert not (tmp_path / "ran").exists()  # the process was never started
    finally:
        context.close()


class BrokenRunnerExecutor(LocalBashExecutor):
    def prepare_launch(self, argv: tuple[str | bytes, ...], spec: ShellExecSpec, env: Mapping[str, str]) -> Launch:
        raise SandboxUnavailable("the test runner is down", runner="test")

    def failed_facts(self, spec: ShellExecSpec, error: SandboxUnavailable) -> SandboxFacts | None:
        return SandboxFacts(
            mode=SandboxMode.WORKSPACE_WRITE, runner="test", runner_failed=True, runner_error=error.reason
        )


def test_runner_failure_foreground_raises_background_settles(tmp_path: Path) -> None:
    context = _mount(tmp_path, BrokenRunnerExecutor)
    try:
        with pytest.raises(SandboxUnavailable, match="the test runner is down"):
            run(context, "touch ran")
        execution = start(context, "touch ran")
        assert execution.done and execution.status == "killed"
        assert execution.sandbox is not None and execution.sandbox.runner_failed
        assert execution.sandbox.runner_error == "the test runner is down"
        result = execution.result()
        assert result.stderr.text == "spawn failed: the test runner is down\n"
        assert not (tmp_path / "ran").exists()
    finally:
        context.close()


@pytest.mark.parametrize(
    ("program", "status", "message"),
    [
        ("/nonexistent/program", 127, "/nonexistent/program: No such file or directory"),
        ("dsh-no-such-command", 127, "dsh-no-such-command: command not found"),
        ("/", 126, "/: Permission denied"),  # a directory: found, not executable
    ],
)
def test_exec_failure_settles_with_the_shell_status(
    ctx: Context, program: str, status: int, message: str
) -> None:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="", argv=(program, "x")))
    execution = ctx.require(ShellExecutor).execute(spec)
    assert execution.wait(0)  # never raises, already settled
    assert execution.status == "completed" and execution.kill() is False
    result = execution.result()
    assert (result.exit_code, result.signal, result.timed_out) == (status, None, False)
    assert result.stderr.text == f"dsh-sandbox: {message}\n"
    assert message.encode() in execution.observed.read("stderr")[0]
    read = execution.read_output()
    assert read.stderr.endswith(message + "\n") and read.exit_code == status


def test_read_output_is_consuming_and_observed_is_not(ctx: Context, tmp_path: Path) -> None:
    execution = start(ctx, "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second >&2")
    wait_until(lambda: b"first" in execution.observed.read("stdout")[0])
    first = execution.read_output()
    assert (first.stdout, first.stderr, first.status, first.lossy) == ("first\n", "", "running", False)
    again = execution.read_output()
    assert (again.stdout, again.stderr) == ("", "")
    (tmp_path / "go").touch()
    assert execution.wait(PATIENCE_S)
    last = execution.read_output()
    assert (last.stdout, last.stderr, last.status, last.exit_code) == ("", "second\n", "completed", 0)
    # The observer still sees everything, from any offset, as often as asked.
    assert execution.observed.read("stdout", 0) == (b"first\n", 6)
    assert execution.observed.read("stdout", 0) == (b"first\n", 6)
    assert execution.observed.read("stdout", 3) == (b"st\n", 6)
    assert execution.observed.read("stderr", 0) == (b"second\n", 7)


def test_lossy_read_names_the_spill_files(ctx: Context) -> None:
    execution = start(ctx, "head -c 300000 /dev/zero | tr '\\0' a; echo; echo e >&2", stdout_max_bytes=1000)
    assert execution.wait(PATIENCE_S)
    read = execution.read_output()
    assert read.lossy
    assert read.stdout_spill is not None and os.path.getsize(read.stdout_spill) == 300001
    assert len(read.stdout.encode()) <= 1000 and read.stdout.endswith("a\n")
    assert read.stderr == "e\n"
    # The observer starts at the oldest byte still held.
    data, end = execution.observed.read("stdout", 0)
    assert end == 300001 and len(data) == 1000


def test_read_output_holds_back_a_split_code_point(ctx: Context, tmp_path: Path) -> None:
    # The first half of "é" arrives, then the rest after a handshake.
    execution = start(ctx, "printf 'x\\303'; while [ ! -e go ]; do sleep 0.01; done; printf '\\251y'")
    wait_until(lambda: execution.observed.read("stdout")[1] == 2)
    assert execution.read_output().stdout == "x"
    (tmp_path / "go").touch()
    assert execution.wait(PATIENCE_S)
    assert execution.read_output().stdout == "éy"


def _cause(execution: object) -> str | None:
    cause: str | None = getattr(execution, "cause", None)
    return cause
