"""What a command could leave on, or do to, host files the filter keeps out: judged from the host.

Setuid/setgid files in the writable roots, inode generation changes and
leases through a read-only fd of a host file outside the roots, and a name
squatted in the host's abstract unix namespace.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.limits import DEGRADE_ESCAPE
from dsh.sandbox.modes import SandboxMode

from tests.runners import file_attacks as attacks
from tests.runners.landlock.helpers import PY, RO, WW, finish, make_policy, py, start

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]
# Unprivileged there may be no pids cgroup: irrelevant to what is tested here, so accepted.
ACCEPT = (DEGRADE_ESCAPE,)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    with attacks.world_writable_tmp() as folder:
        yield folder


def test_no_setid_file_is_left_in_the_writable_roots(
    runner: LandlockRunner, layout: Layout, shared_tmp: Path
) -> None:
    ws, _ = layout
    seed = attacks.seed(shared_tmp / "seed")
    tag = f"x{os.urandom(4).hex()}"
    policy = make_policy(WW, ws, extra_roots=(shared_tmp,), accept_degraded=ACCEPT)
    result = py(runner, policy, attacks.SETID, tag, str(seed), str(ws), str(shared_tmp))
    got = attacks.outcomes(result.out)
    assert attacks.leftovers([ws, shared_tmp], tag) == [], got
    for folder in (ws, shared_tmp):
        assert got[f"{folder} control-chmod"] == "ok" and got[f"{folder} control-install"] == "ok", result.err
        assert got[f"{folder} chmod-4755"] != "ok" and got[f"{folder} open"] == f"errno {errno.EPERM}", got


@pytest.mark.parametrize("mode", MODES)
def test_inode_generation_of_a_host_file_stays(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    victim = outside / "victim"
    victim.write_text("host's\n")  # owned by the caller: the command's uid
    before = attacks.generation(victim)
    result = py(runner, make_policy(mode, ws, accept_degraded=ACCEPT), attacks.SETVERSION, str(victim))
    assert attacks.generation(victim) == before, result.out + result.err
    assert result.out.split()[1::2] == [str(errno.EPERM)] * 4, result.out + result.err


@pytest.mark.parametrize("mode", MODES)
def test_no_lease_and_no_abstract_name_held_against_the_host(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode
) -> None:
    ws, outside = layout
    victim = outside / "victim"
    victim.write_text("host's\n")
    name = f"@dsh-squat-{os.getpid()}-{os.urandom(4).hex()}"
    argv = [PY, "-c", attacks.HOLD, str(victim), name]
    proc, launch = start(runner, make_policy(mode, ws, accept_degraded=ACCEPT), argv)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        attacks.host_is_not_held(victim, name)
    finally:
        if launch.kill_tree is not None:
            launch.kill_tree(proc.pid, 9)
        proc.kill()
        finish(proc, launch)
    assert line.split() == ["lease", f"errno={errno.EPERM}", "bind", f"errno={errno.EACCES}", "listen",
                            f"errno={errno.EACCES}"], line  # fmt: skip
