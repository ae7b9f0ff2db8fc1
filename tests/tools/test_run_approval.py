"""``dsh-sandbox run --approval``: a denied run escalated at the terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import trusted_config_dir
from tests.support.sandboxed import need_runner
from tests.support.terminal import read_terminal


@pytest.fixture(autouse=True)
def runner() -> str:
    need_runner("bwrap")
    return "bwrap"


def run(workspace: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DSH_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "bwrap", "--mode", "read-only",
         "--workspace", str(workspace), *args],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )


def rules(tmp_path: Path, command: str) -> str:
    # Outside /tmp and the workspace: run refuses a rules file a command could rewrite.
    path = trusted_config_dir() / f"rules-{tmp_path.name}.toml"
    path.write_text(
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{tmp_path}/**"\ncommand = "{command}"\n'
    )
    return f"rules:{path}"


def test_rules_approve_the_rerun(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    done = run(workspace, trusted_dir, "--approval", rules(tmp_path, "echo a >> a.txt"),
               "-c", "echo a >> a.txt")
    assert done.returncode == 0, done.stderr
    assert "re-running once under workspace-write" in done.stderr
    assert (workspace / "a.txt").read_text() == "a\n"  # denied once, then ran once
    [record] = [json.loads(x) for x in (trusted_dir / "escalations.jsonl").read_text().splitlines()]
    assert record["decision"] == "approve_once" and record["requested_mode"] == "workspace-write"
    assert record["tool"] == "dsh-sandbox run" and record["command"] == "echo a >> a.txt"


def test_rules_deny_a_neighbour_and_deny_never_asks(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    done = run(workspace, trusted_dir, "--approval", rules(tmp_path, "echo a >> a.txt"),
               "-c", "echo b >> a.txt")
    assert done.returncode == 1 and "escalation to workspace-write denied" in done.stderr
    assert not (workspace / "a.txt").exists()
    plain = run(workspace, trusted_dir, "--approval", "deny", "-c", "echo a >> a.txt")
    assert plain.returncode == 1 and "escalation" not in plain.stderr
    assert not (workspace / "a.txt").exists()
    bad = run(workspace, trusted_dir, "--approval", "yes-please", "-c", "echo a >> a.txt")
    assert bad.returncode == 2 and "--approval 'yes-please'" in bad.stderr


def test_argv_runs_are_escalated_with_their_exact_argv(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    target = workspace / "a b.txt"
    done = run(workspace, trusted_dir, "--approval", rules(tmp_path, f"touch '{target}'"),
               "--", "touch", str(target))
    assert done.returncode == 0, done.stderr
    assert target.exists()


@pytest.mark.parametrize(("answer", "ran"), [(b"y\n", True), (b"n\n", False), (b"\n", False)])
def test_prompt_on_the_terminal(workspace: Path, tmp_path: Path, trusted_dir: Path, answer: bytes, ran: bool) -> None:
    env = {**os.environ, "DSH_HOME": str(trusted_dir)}
    argv = [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "bwrap", "--mode",
            "read-only", "--workspace", str(workspace), "--approval", "prompt",
            "-c", "echo a >> a.txt"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.execvpe(argv[0], argv, env)
    try:
        shown = read_terminal(fd, time.monotonic() + 120, answer)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = shown.decode(errors="replace")
    assert "echo a >> a.txt" in text and "read-only -> workspace-write" in text
    assert (os.waitstatus_to_exitcode(status) == 0) == ran, text
    assert (workspace / "a.txt").exists() == ran


def test_an_old_prefix_rule_stops_the_run_before_it_starts(workspace: Path, tmp_path: Path) -> None:
    """A prefix rule without 'args' used to approve any further words: exit 2, nothing runs."""
    path = trusted_config_dir() / f"old-{tmp_path.name}.toml"
    path.write_text(f'[[rule]]\nmode = "workspace-write"\nworkdir = "{tmp_path}/**"\nprefix = "touch"\n')
    done = run(workspace, tmp_path, "--approval", f"rules:{path}", "--", "touch", str(workspace / "ran"))
    assert done.returncode == 2, done.stderr
    assert f"{path}:4: rule #1, key 'prefix': needs 'args'" in done.stderr and "Traceback" not in done.stderr
    assert not (workspace / "ran").exists()
