"""What the CLI says about a run cannot be forged or hidden by the command."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import cli
from tests.support.terminal import read_terminal

DANGER = ("--mode", "danger-full-access")


def test_a_command_exiting_125_is_not_reported_as_a_runner_failure(tmp_path: Path) -> None:
    done = cli("run", *DANGER, "--", "sh", "-c", "echo out; exit 125", cwd=tmp_path)
    assert done.returncode == 125  # the command's own status, passed through
    assert done.stdout == b"out\n"
    assert b"RUNNER_FAILED" not in done.stderr and b"did not start" not in done.stderr, done.stderr


def test_notes_reset_the_terminal_after_the_commands_output(tmp_path: Path) -> None:
    """Output ending in 'conceal' (ESC [8m) must not hide the notes that follow it."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "dsh.cli", "run", *DANGER, "--timeout", "0.2", "--",
         "sh", "-c", "printf 'x\\033[8m' >&2; sleep 30"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
    )
    os.close(follower)
    try:
        seen = read_terminal(leader, time.monotonic() + 120)
    finally:
        os.close(leader)
        proc.wait(60)
    assert proc.returncode == 124, seen
    conceal = seen.index(b"\x1b[8m")
    note = seen.index(b"dsh-sandbox: timed out", conceal)
    assert b"\x1b[0m" in seen[conceal:note], seen
