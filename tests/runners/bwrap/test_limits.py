"""Resource limits of the bwrap runner: fork bombs, memory hogs, big files, wall time."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

from dsh.runners.bwrap import BwrapRunner
from dsh.runners.bwrap.limits import CgroupSupport
from dsh.runners.linux.cgroups import discover
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.runner import LocalLaunch

from tests.runners.bwrap.helpers import Layout, policy, run, sh
from tests.runners.bwrap.test_isolation import host_pids_with
from tests.support.require import unavailable
from tests.support.wait import wait_until

PY = sys.executable

FORK_UNTIL_REFUSED = """
import os, sys, time
forked = 0
try:
    while forked < 10000:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        forked += 1
except OSError as exc:
    print("REFUSED after", forked, "forks:", exc.strerror)
"""


def needs_cgroup(runner: BwrapRunner, controller: str) -> None:
    cg = runner.facts().cgroups
    parent = cg.pids_parent if controller == "pids" else cg.memory_parent
    if parent is None:
        unavailable("cgroup", f"bwrap found no writable {controller} cgroup ({cg.reason}); see the degradation tests")


def leftover_cgroups() -> list[str]:
    """This process's bwrap cgroups that still hold a process (idle empty ones are
    kept for reuse until the runner closes)."""
    prefix = f"dsh-bwrap-{os.getpid()}-"
    found = []
    for h in discover():
        for dirpath, dirnames, _ in os.walk(h.own_dir):
            if prefix in dirpath and (Path(dirpath) / "cgroup.procs").read_text().strip():
                found.append(dirpath)
            if dirpath.count("/") > 10:
                dirnames.clear()
    return found


def test_fork_bomb_is_contained(runner: BwrapRunner, layout: Layout) -> None:
    needs_cgroup(runner, "pids")
    limits = ResourceLimits(max_processes=16, wall_time_s=120)
    result = run(runner, [PY, "-c", FORK_UNTIL_REFUSED], policy(layout.ws, limits=limits))
    assert result.returncode == 0, result.err
    assert "REFUSED after" in result.out, result.out
    forked = int(result.out.split("REFUSED after", 1)[1].split()[0])
    assert 0 < forked < 16
    assert leftover_cgroups() == []
    assert subprocess.run(["true"], timeout=60).returncode == 0  # the host still forks


def test_shell_fork_bomb_ends_and_leaves_nothing(runner: BwrapRunner, layout: Layout) -> None:
    needs_cgroup(runner, "pids")
    marker = f"bomb{uuid.uuid4().hex[:10]}"
    limits = ResourceLimits(max_processes=32, wall_time_s=5)
    script = f"b() {{ b | b & }}; b; exec -a {marker} sleep 600"
    result = run(runner, ["bash", "-c", script], policy(layout.ws, limits=limits))
    assert result.returncode == 124, (result.returncode, result.err[-500:])
    assert "Resource temporarily unavailable" in result.err
    wait_until(lambda: not host_pids_with(marker), "the bomb's processes to be gone")
    assert leftover_cgroups() == []


def test_cgroup_cannot_be_left_from_inside(runner: BwrapRunner, layout: Layout) -> None:
    needs_cgroup(runner, "pids")
    limits = ResourceLimits(max_processes=8)
    script = """
        for f in /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/cgroup.procs \
                 /sys/fs/cgroup/pids/dsh-*/pids.max; do
            [ -e "$f" ] && echo 100000 > "$f" 2>/dev/null && exit 10
            [ -e "$f" ] && echo $$ > "$f" 2>/dev/null && exit 11
        done
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, limits=limits))
    assert result.returncode == 0, result.err


def test_memory_hog_is_killed(runner: BwrapRunner, layout: Layout) -> None:
    needs_cgroup(runner, "memory")
    limits = ResourceLimits(max_memory_bytes=64 << 20, wall_time_s=120)
    hog = "x = bytearray(512 << 20)\nx[::4096] = b'1' * len(x[::4096])\nprint('HOG-SURVIVED')"
    result = run(runner, [PY, "-c", hog], policy(layout.ws, limits=limits))
    assert "HOG-SURVIVED" not in result.out
    assert result.returncode in (137, -9), (result.returncode, result.err)
    assert leftover_cgroups() == []


def test_file_size_limit(runner: BwrapRunner, layout: Layout) -> None:
    limits = ResourceLimits(max_file_size_bytes=1 << 20)
    result = sh(runner, "head -c 4194304 /dev/zero > big; echo status=$?", policy(layout.ws, limits=limits))
    assert (layout.ws / "big").stat().st_size <= 1 << 20
    assert "status=0" not in result.out, result.out


def test_wall_time_limit_kills_the_whole_sandbox(runner: BwrapRunner, layout: Layout) -> None:
    marker = f"5{uuid.uuid4().int % 10**6:06d}.5"
    limits = ResourceLimits(wall_time_s=2)
    script = f"setsid sh -c '(sleep {marker} &)' </dev/null >/dev/null 2>&1; exec sleep 600"
    result = sh(runner, script, policy(layout.ws, limits=limits))
    assert result.returncode == 124
    wait_until(lambda: not host_pids_with(marker), f"daemon 'sleep {marker}' to be gone")


def test_limits_are_explained(runner: BwrapRunner, layout: Layout) -> None:
    limits = ResourceLimits(max_processes=10, max_memory_bytes=1 << 30, max_file_size_bytes=1 << 20, wall_time_s=30)
    plan = runner.explain(policy(layout.ws, limits=limits))
    text = "\n".join(plan.limits)
    for word in ("processes <= 10", "memory <=", "file size <=", "wall time <= 30"):
        assert word in text


def _without_cgroups(runner: BwrapRunner) -> BwrapRunner:
    """A runner whose (real) probe facts lack cgroups, as for a non-delegated user."""
    facts = runner.facts()
    degraded = BwrapRunner()
    degraded._facts = dataclasses.replace(facts, cgroups=CgroupSupport(None, reason="no cgroups (test)"))
    return degraded


def test_a_memory_limit_without_a_cgroup_runs_per_process_and_says_so(runner: BwrapRunner, layout: Layout) -> None:
    # A normal login session has no delegated cgroup: the built-in profiles'
    # max_memory must not refuse the run; it becomes RLIMIT_AS, named as such.
    degraded = _without_cgroups(runner)
    limits = ResourceLimits(max_memory_bytes=256 << 20)
    limited = policy(layout.ws, limits=limits)
    assert degraded.enforcement(limited).level == "full"
    assert "address-space" in degraded.limitations(limited)
    assert any("RLIMIT_AS per process" in line for line in degraded.explain(limited).limits)
    launch = degraded.prepare(["true"], limited, cwd=str(layout.ws), env={})
    assert isinstance(launch, LocalLaunch)
    assert f"--as={256 << 20}" in launch.argv
    assert launch.cleanup is not None
    launch.cleanup()
    if degraded.facts().is_root:
        procs = degraded.enforcement(policy(layout.ws, limits=ResourceLimits(max_processes=5)))
        assert procs.degradations == ("bwrap-limit-processes",)
        assert "root" in procs.describe()
