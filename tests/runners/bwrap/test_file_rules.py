"""Setuid/setgid files, inode generations and leases under bwrap: judged from the host.

As root, uid 0 in the sandbox is the host's root: a setuid file it leaves in
a writable root is a setuid-root binary on the host, and the host's files are
its own (a lease needs ownership).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import LocalLaunch

from tests.runners import file_attacks as attacks
from tests.runners.bwrap.helpers import BOTH_MODES, Layout, kill_launch, policy, run, spawn


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    with attacks.world_writable_tmp() as folder:
        yield folder


def test_no_setid_file_is_left_in_the_writable_roots(runner: BwrapRunner, layout: Layout, shared_tmp: Path) -> None:
    ws = layout.ws
    seed = attacks.seed(shared_tmp / "seed")
    tag = f"x{os.urandom(4).hex()}"
    pol = policy(ws, roots=[ws, shared_tmp])
    result = run(runner, [sys.executable, "-c", attacks.SETID, tag, str(seed), str(ws), str(shared_tmp)], pol)
    got = attacks.outcomes(result.out)
    assert attacks.leftovers([ws, shared_tmp], tag) == [], got
    for folder in (ws, shared_tmp):
        assert got[f"{folder} control-chmod"] == "ok" and got[f"{folder} control-install"] == "ok", result.err
        assert got[f"{folder} chmod-4755"] != "ok" and got[f"{folder} open"] == f"errno {errno.EPERM}", got


@BOTH_MODES
def test_inode_generation_of_a_host_file_stays(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    victim = layout.outside / "victim"
    victim.write_text("host's\n")
    before = attacks.generation(victim)
    result = run(runner, [sys.executable, "-c", attacks.SETVERSION, str(victim)], policy(layout.ws, mode))
    assert attacks.generation(victim) == before, result.out + result.err
    assert result.out.split()[1::2] == [str(errno.EPERM)] * 4, result.out + result.err


@BOTH_MODES
def test_no_lease_held_against_a_host_writer(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    victim = layout.outside / "victim"
    victim.write_text("host's\n")
    name = f"@dsh-squat-{os.getpid()}-{os.urandom(4).hex()}"
    argv = [sys.executable, "-c", attacks.HOLD, str(victim), name]
    launch = runner.prepare(argv, policy(layout.ws, mode), cwd=str(layout.ws), env={})
    assert isinstance(launch, LocalLaunch)
    proc = spawn(launch, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        attacks.host_is_not_held(victim, name)
    finally:
        kill_launch(launch, proc)
        proc.communicate(timeout=60)
        if launch.cleanup is not None:
            launch.cleanup()
    # bind and listen stay: the abstract names are the sandbox's own network namespace's.
    assert line.split() == ["lease", f"errno={errno.EPERM}", "bind", "ok", "listen", f"errno={errno.EINVAL}"], line
