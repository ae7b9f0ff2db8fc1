"""``dsh-sandbox run`` exits like a shell on every runner: 127 for a command
that is not found, 126 for one that is found but cannot be executed, 128+N for
a death by signal N, the command's own status otherwise, and 125 (with
SANDBOX_UNAVAILABLE or RUNNER_FAILED on stderr) when the sandbox itself fails.
A command that could not be executed is never reported as a denied write."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.cli import cli, trusted_config_dir
from tests.support.sandboxed import need_runner

RUNNERS = ("danger-full-access", "landlock", "bwrap", "docker", "gvisor", "e2b")


@pytest.fixture(params=RUNNERS)
def flags(request: pytest.FixtureRequest, workspace: Path) -> Iterator[Sequence[str]]:
    """The ``run`` flags for one runner, in read-only mode (where a misread
    exec failure would be blamed on a write)."""
    name: str = request.param
    if name == "danger-full-access":
        yield ("--mode", name)
        return
    if name != "e2b":
        need_runner(name)
        accept = ("--accept-degraded", "landlock-process-list") if name == "landlock" else ()
        yield ("--runner", name, "--mode", "read-only", *accept)
        return
    from tests.runners.e2b.conftest import need_sdk

    need_sdk()
    from tests.runners.e2b.envd_server import start_envd_server

    root = workspace.parent / "e2b-root"
    root.mkdir()
    url, stop = start_envd_server(root)
    composition = trusted_config_dir() / f"e2b-{workspace.parent.name}.json"
    composition.write_text(json.dumps([
        {"id": "policy", "name": "sandbox-policy",
         "config": {"mode": "read-only", "workspace": str(workspace), "accept_degraded": ["e2b-debug"]}},
        {"id": "sandbox", "name": "sandbox",
         "config": {"runner": "e2b", "options": {"e2b": {"sandbox_url": url, "setup_timeout": 120}}}},
        {"id": "shell", "name": "bash-sandbox", "config": {"cwd": str(workspace)}},
    ]))
    try:
        yield ("--composition", str(composition))
    finally:
        stop()
        composition.unlink()


@pytest.fixture
def programs(workspace: Path) -> Path:
    script = workspace / "not-executable.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    (workspace / "a-directory").mkdir()
    return workspace


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["dsh-no-such-command", "x"], 127),
        (["./dsh-no-such-file"], 127),
        (["./not-executable.sh"], 126),
        (["./a-directory"], 126),
        (["sh", "-c", "kill -TERM $$"], 128 + 15),
        (["sh", "-c", "exit 1"], 1),
    ],
)
def test_status_like_a_shell(flags: Sequence[str], programs: Path, argv: list[str], status: int) -> None:
    done = cli("run", *flags, "--", *argv, cwd=programs)
    assert done.returncode == status, done.stderr
    assert b"denied under" not in done.stderr, done.stderr
    assert b"RUNNER_FAILED" not in done.stderr and b"Traceback" not in done.stderr
    assert b"ran" not in done.stdout


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["dsh-no-such-command", "x"], 127, "dsh-no-such-command: command not found"),
        (["./dsh-no-such-file"], 127, "./dsh-no-such-file: No such file or directory"),
        (["./not-executable.sh"], 126, "./not-executable.sh: Permission denied"),
        (["./a-directory"], 126, "./a-directory: Permission denied"),
    ],
)
def test_one_message_per_exec_failure(flags: Sequence[str], programs: Path, argv: list[str], status: int,
                                      message: str) -> None:
    # The same one line on every runner: not bwrap's "execvp", not dash's "exec: x: not found".
    done = cli("run", *flags, "--", *argv, cwd=programs)
    assert done.returncode == status, done.stderr
    assert done.stderr.decode() == f"dsh-sandbox: {message}\n"


def test_a_command_that_prints_an_exec_failure_keeps_its_status(flags: Sequence[str], workspace: Path) -> None:
    # bwrap's own "execvp" line decides nothing: only its status pipe says the
    # command did not start.
    fake = "echo 'bwrap: execvp x: No such file or directory' >&2; exit 1"
    done = cli("run", *flags, "--", "sh", "-c", fake, cwd=workspace)
    assert done.returncode == 1, done.stderr


def test_unavailable_runner_exits_125(workspace: Path) -> None:
    marker = workspace / "ran"
    done = cli("run", "--runner", "seatbelt", "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 125, done.stderr
    assert b"SANDBOX_UNAVAILABLE" in done.stderr and b"Traceback" not in done.stderr
    assert not marker.exists()


def test_tool_call_reports_an_exec_failure_without_a_denial(programs: Path) -> None:
    # bash's own "./x: Permission denied" for a file it cannot execute (126)
    # was blamed on a write the read-only policy refused.
    need_runner("bwrap")
    args = json.dumps({"command": "./not-executable.sh", "description": "run it"})
    done = cli("tool", "call", "bash", args, "--runner", "bwrap", "--mode", "read-only", cwd=programs)
    assert b"[exit code: 126]" in done.stdout, done.stdout
    assert b"denied under" not in done.stdout


def test_a_run_that_never_started_is_the_runners_failure(capsys: pytest.CaptureFixture[str]) -> None:
    # What bwrap's status pipe yields for its own setup failure (see
    # tests/runners/bwrap/test_exit_status.py): no exit code and no signal.
    from dsh.cli.run_output import exit_status, report
    from dsh.executors.seam import CollectedOutput, ShellRunResult

    empty = CollectedOutput(text="")
    result = ShellRunResult(exit_code=None, signal=None, timed_out=False, aborted=False,
                            timeout_ms=1000, stdout=empty, stderr=empty)
    assert exit_status(result) == 125
    report(result, spec=None)
    assert "RUNNER_FAILED: the command did not start" in capsys.readouterr().err
