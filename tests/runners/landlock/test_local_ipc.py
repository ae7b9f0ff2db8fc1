"""The local-IPC limitation Landlock declares is true, and what it says still works does.

Without namespaces, /dev/shm and the loopback are the host's: multiprocessing's
semaphores and a loopback test server are refused (and declared, so the
workload scenarios report them as not-enforced with the reason), while a
socketpair keeps working.  Checked from the host: no semaphore was left in its
/dev/shm.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.limits import DEGRADE_ESCAPE
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import RO, WW, make_policy, py

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]


@pytest.mark.parametrize("mode", MODES)
def test_local_ipc_is_declared_and_explained(runner: LandlockRunner, layout: tuple[Path, Path],
                                             mode: SandboxMode) -> None:
    policy = make_policy(mode, layout[0])
    why = runner.limitations(policy)["local-ipc"]
    assert "multiprocessing" in why and "loopback" in why
    assert why in runner.explain(policy).cannot
    # A limitation refuses work; it is not an enforcement gap and never gates a run.
    assert not any("ipc" in d for d in runner.enforcement(policy).degradations)
    assert runner.limitations(make_policy(SandboxMode.DANGER_FULL_ACCESS, layout[0])) == {}


@pytest.mark.parametrize("mode", MODES)
def test_what_the_limitation_names_fails_and_socketpair_works(
        runner: LandlockRunner, layout: tuple[Path, Path], mode: SandboxMode) -> None:
    before = set(os.listdir("/dev/shm"))
    code = (
        "import multiprocessing as mp, socket\n"
        "a, b = socket.socketpair(); a.send(b'pair'); print(b.recv(4).decode())\n"
        "for what in ('lock', 'server'):\n"
        "    try:\n"
        "        if what == 'lock':\n"
        "            mp.get_context('fork').Lock()\n"
        "        else:\n"
        "            socket.socket().bind(('127.0.0.1', 0))\n"
        "        print(what, 'ok')\n"
        "    except OSError as exc:\n"
        "        print(what, 'refused', exc.errno)\n"
    )
    # Unprivileged there may be no pids cgroup: irrelevant to IPC, so accepted.
    result = py(runner, make_policy(mode, layout[0], accept_degraded=(DEGRADE_ESCAPE,)), code)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "pair"
    assert lines[1].startswith("lock refused") and lines[2].startswith("server refused"), lines
    assert {n for n in set(os.listdir("/dev/shm")) - before if n.startswith("sem.")} == set()
