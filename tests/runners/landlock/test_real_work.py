"""Ordinary work keeps running under the stricter filter; what cannot work is declared."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.runner import LOCAL_IPC
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import RO, WW, make_policy, py, run, sh

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]


@pytest.mark.parametrize("mode", MODES)
def test_pipes_and_socketpairs_work(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    script = "printf 'a\\nb\\n' | sort -r | head -n1; echo in | cat /dev/stdin"
    result = sh(runner, make_policy(mode, layout[0]), script)
    assert result.out == "b\nin\n", result.err
    code = (
        "import multiprocessing as mp, socket\n"
        "a, b = socket.socketpair(); a.sendall(b'pair'); print(b.recv(4).decode())\n"
        "def child(conn):\n"
        "    conn.send(conn.recv() * 2)\n"
        "if __name__ == '__main__':\n"
        "    mp.set_start_method('fork')\n"
        "    parent, other = mp.Pipe()\n"
        "    p = mp.Process(target=child, args=(other,)); p.start()\n"
        "    parent.send(21); print(parent.recv()); p.join(); print(p.exitcode)\n"
    )
    result = py(runner, make_policy(mode, layout[0]), code)
    assert result.out.split() == ["pair", "42", "0"], result.err


def test_fifo_in_the_workspace_works(runner: LandlockRunner, layout: Layout) -> None:
    result = sh(runner, make_policy(WW, layout[0]), "mkfifo q && (echo through > q &) && cat q")
    assert result.out == "through\n", result.err


@pytest.mark.parametrize("mode", MODES)
def test_git_read_commands_work(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws = layout[0]
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "HOME": str(ws)}  # fmt: skip
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "file.txt"], ["git", "commit", "-qm", "first"]):
        subprocess.run(argv, cwd=ws, env={"PATH": "/usr/bin:/bin", **env}, check=True)
    (ws / "file.txt").write_text("changed\n")
    script = "git status --short; git log --oneline | wc -l; git diff --stat | tail -n1; git rev-parse --abbrev-ref @"
    result = run(runner, make_policy(mode, ws), ["bash", "-c", script], env=env)
    assert result.returncode == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == " M file.txt" and lines[1] == "1" and "1 file changed" in lines[2] and lines[3] == "main"


def test_multiprocessing_locks_fail_and_are_declared(runner: LandlockRunner, layout: Layout) -> None:
    # POSIX semaphores live in the host's /dev/shm: not granted, so this keeps failing.
    result = py(runner, make_policy(WW, layout[0]), "import multiprocessing; multiprocessing.Lock()")
    assert result.returncode != 0 and "Error" in result.err
    plan = runner.explain(make_policy(WW, layout[0]))
    assert LOCAL_IPC in plan.cannot and "/dev/shm" in LOCAL_IPC and "loopback" in LOCAL_IPC
    assert runner.probe().details["local_ipc"] == LOCAL_IPC
