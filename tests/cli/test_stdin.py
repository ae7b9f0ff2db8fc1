"""``dsh-sandbox run`` passes its stdin through to the command: whole, EOF included, in bounded memory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sandboxed import accept_for, need_runner


def _run(workspace: Path, runner: str, argv: list[str], stdin: object) -> subprocess.CompletedProcess[bytes]:
    need_runner(runner)
    accept = [f"--accept-degraded={name}" for name in accept_for(runner)]
    return subprocess.run(
        [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", runner, *accept, "--workspace", str(workspace),
         "--", *argv],
        stdin=stdin, capture_output=True, cwd=workspace, timeout=600, check=False,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker", "gvisor"])
def test_a_pipe_reaches_cat(workspace: Path, runner: str) -> None:
    done = subprocess.run(["sh", "-c", 'echo hi | "$@"', "sh", sys.executable, "-P", "-m", "dsh.cli", "run",
                           "--runner", runner, *[f"--accept-degraded={n}" for n in accept_for(runner)],
                           "--workspace", str(workspace), "--", "cat"],
                          capture_output=True, cwd=workspace, timeout=600, check=False)
    need_runner(runner)
    assert (done.returncode, done.stdout) == (0, b"hi\n"), done.stderr
    assert b"Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("runner", ["bwrap", "docker", "gvisor"])
def test_zero_bytes_and_100_mib_reach_the_command_whole(workspace: Path, runner: str, tmp_path: Path) -> None:
    empty = _run(workspace, runner, ["wc", "-c"], subprocess.DEVNULL)
    assert (empty.returncode, empty.stdout.strip()) == (0, b"0"), empty.stderr
    big = tmp_path / "big"
    with big.open("wb") as fh:
        fh.write(os.urandom(100 << 20))
    with big.open("rb") as fh:
        done = _run(workspace, runner, ["sha256sum"], fh)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0].decode() == hashlib.sha256(big.read_bytes()).hexdigest()


def test_a_command_that_does_not_read_ends_without_waiting_for_stdin(workspace: Path) -> None:
    # stdin is an endless pipe: the run must end when the command does.
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as producer:
        done = _run(workspace, "bwrap", ["head", "-c", "4"], producer.stdout)
        producer.kill()
    assert (done.returncode, done.stdout) == (0, b"y\ny\n"), done.stderr
