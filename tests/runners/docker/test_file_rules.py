"""Setuid/setgid files, inode generations and leases in the container: judged from the host.

As root on the host, uid 0 in the container is the host's root: a setuid file
it leaves in the bind-mounted workspace is a setuid-root binary on the host,
and the workspace's files are its own (a lease needs ownership).
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

from dsh.sandbox.modes import SandboxMode

from tests.runners import file_attacks as attacks
from tests.runners.docker.helpers import docker_runner, policy, run, start
from tests.support.wait import PATIENCE_S

RO = SandboxMode.READ_ONLY


def test_no_setid_file_is_left_in_the_workspace(workspace: Path) -> None:
    seed = attacks.seed(workspace / "seed")
    tag = f"x{os.urandom(4).hex()}"
    with docker_runner() as runner:
        result = run(runner, ["python3", "-c", attacks.SETID, tag, str(seed), str(workspace)], policy(workspace))
    got = attacks.outcomes(result.stdout.decode())
    assert attacks.leftovers([workspace], tag) == [], got
    assert got[f"{workspace} control-chmod"] == "ok" and got[f"{workspace} control-install"] == "ok", result.stderr
    assert got[f"{workspace} chmod-4755"] != "ok" and got[f"{workspace} open"] == f"errno {errno.EPERM}", got


def test_inode_generation_stays_in_read_only(workspace: Path) -> None:
    victim = workspace / "victim"
    victim.write_text("host's\n")
    before = attacks.generation(victim)
    with docker_runner() as runner:
        result = run(runner, ["python3", "-c", attacks.SETVERSION, str(victim)], policy(workspace, RO))
    assert attacks.generation(victim) == before, result.stdout + result.stderr
    # The read-only mount refused them already (EROFS); the filter refuses them first, on any mount.
    assert result.stdout.decode().split()[1::2] == [str(errno.EPERM)] * 4, result.stdout + result.stderr


def test_no_lease_held_against_a_host_writer(workspace: Path) -> None:
    victim = workspace / "victim"
    victim.write_text("host's\n")
    name = f"@dsh-squat-{os.getpid()}-{os.urandom(4).hex()}"
    with docker_runner() as runner:
        proc, reader = start(runner, ["python3", "-c", attacks.HOLD, str(victim), name], policy(workspace, RO))
        try:
            assert reader.first_line.wait(PATIENCE_S), "the command never got ready"
            attacks.host_is_not_held(victim, name)
        finally:
            proc.kill(signal.SIGKILL)
            held = reader.finish()
    line = held.stdout.decode().split()
    # bind and listen stay: the abstract names are the container's own network namespace's.
    assert line == ["lease", f"errno={errno.EPERM}", "bind", "ok", "listen", f"errno={errno.EINVAL}"], held.stderr
