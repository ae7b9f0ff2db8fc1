"""Resource limits: a fork bomb, a memory hog, a big file, a wall-time overrun and
an escaped daemon all end with a clear result while the host stays responsive."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.limits import DEGRADE_ESCAPE, DEGRADE_LIMITS
from dsh.runners.landlock.rules import DEGRADE_METADATA
from dsh.runners.landlock.runner import PROCESS_LIST_GAP
from dsh.runners.linux.cgroups import CgroupSession
from dsh.runners.linux.env_hop import HOP_NAME
from dsh.sandbox.policy import ResourceLimits

from tests.runners.landlock.helpers import PY, RO, WW, make_policy, run
from tests.support.require import need_cgroup

Layout = tuple[Path, Path]
MiB = 1024 * 1024



def _host_responsive() -> None:
    done = subprocess.run(["true"], timeout=60)
    assert done.returncode == 0


FORK_BOMB = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.05)\n"


def test_fork_bomb_is_contained(runner: LandlockRunner, layout: Layout) -> None:
    need_cgroup("pids")
    limits = ResourceLimits(max_processes=64, wall_time_s=5)
    policy = make_policy(WW, layout[0], limits=limits)
    # limits held: no limits gap (the process list is Landlock's in every policy)
    assert runner.enforcement(policy).degradations == (DEGRADE_METADATA, PROCESS_LIST_GAP.degradation)
    launch = runner.prepare([PY, "-c", FORK_BOMB], policy, cwd=str(layout[0]), env={})
    assert launch.kill_tree is not None and launch.cleanup is not None
    proc = launch.spawn_in(lambda: subprocess.Popen(list(launch.argv)))  # type: ignore[misc]
    cgroup = launch.cleanup.__self__.cgroup  # type: ignore[attr-defined]
    try:
        _host_responsive()  # while the bomb runs
        proc.wait(timeout=120)  # the wall-time watchdog kills the whole cgroup
        assert proc.returncode == -signal.SIGKILL
        events = (cgroup.path("pids") / "pids.events").read_text()
        assert int(events.split()[1]) > 0  # forks were refused at pids.max
    finally:
        launch.cleanup()
    assert cgroup.pids() == set()  # nothing left inside
    _host_responsive()


def test_memory_hog_is_killed(runner: LandlockRunner, layout: Layout) -> None:
    need_cgroup("memory")
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))\n"
    policy = make_policy(WW, layout[0], limits=ResourceLimits(max_memory_bytes=256 * MiB))
    result = run(runner, policy, [PY, "-c", hog])
    # cgroup OOM kill (SIGKILL) or, under RLIMIT_AS, a MemoryError: never success.
    assert result.returncode == -signal.SIGKILL or "MemoryError" in result.err
    _host_responsive()


def test_file_size_limit(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    # Not about containment: a user without a writable cgroup accepts that gap here.
    policy = make_policy(WW, ws, limits=ResourceLimits(max_file_size_bytes=1 * MiB), accept_degraded=(DEGRADE_ESCAPE,))
    launch = runner.prepare(["head", "-c", "4M", "/dev/zero"], policy, cwd=str(ws), env={})
    # Exact after prlimit's "--" and the hop that hands the command its environment.
    assert launch.argv[-6] == HOP_NAME and str(launch.argv[-5]).isdigit()
    assert launch.argv[-4:] == ("head", "-c", "4M", "/dev/zero")
    if launch.cleanup is not None:
        launch.cleanup()
    result = run(runner, policy, ["bash", "-c", "head -c 4M /dev/zero > big"])
    assert result.returncode != 0
    assert os.path.getsize(ws / "big") <= 1 * MiB


def test_wall_time_kills_the_command_and_its_escaped_children(runner: LandlockRunner, layout: Layout) -> None:
    need_cgroup()
    ws, _ = layout
    marker = f"dsh-landlock-escape-{os.getpid()}"
    script = f"setsid bash -c 'exec -a {marker} sleep 300' & sleep 300"
    policy = make_policy(WW, ws, limits=ResourceLimits(wall_time_s=2))
    result = run(runner, policy, ["bash", "-c", script])
    assert result.returncode == -signal.SIGKILL
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == ""  # the setsid'd child did not survive


def test_missing_limit_is_reported(monkeypatch: pytest.MonkeyPatch, layout: Layout) -> None:
    # Without cgroups (as a non-delegated user would be) and as root, nothing caps processes.
    import dsh.runners.landlock.runner as runner_module

    monkeypatch.setattr(runner_module, "CgroupSession", lambda tag: CgroupSession(tag, versions=()))
    instance = LandlockRunner()
    try:
        policy = make_policy(WW, layout[0], limits=ResourceLimits(max_processes=10))
        enforcement = instance.enforcement(policy)
        if os.geteuid() == 0:
            assert enforcement.level == "partial"
            assert set(enforcement.degradations) == {DEGRADE_LIMITS, DEGRADE_METADATA, DEGRADE_ESCAPE,
                                                     PROCESS_LIST_GAP.degradation}
            assert any("RLIMIT_NPROC is ignored for root" in m for m in enforcement.missing)
            assert any("max_processes" in c for c in instance.explain(policy).cannot)
        else:
            assert DEGRADE_ESCAPE in enforcement.degradations
            accepted = make_policy(WW, layout[0], limits=ResourceLimits(max_processes=10),
                                   accept_degraded=(DEGRADE_ESCAPE,))
            assert "--nproc=10" in instance.prepare(["true"], accepted, cwd="/", env={}).argv
    finally:
        instance.close()


def test_without_a_pids_cgroup_escape_is_declared(monkeypatch: pytest.MonkeyPatch, layout: Layout) -> None:
    import dsh.runners.landlock.runner as runner_module

    monkeypatch.setattr(runner_module, "CgroupSession", lambda tag: CgroupSession(tag, versions=()))
    instance = LandlockRunner()
    try:
        for mode in (RO, WW):
            enforcement = instance.enforcement(make_policy(mode, layout[0]))
            assert DEGRADE_ESCAPE in enforcement.degradations
            assert any("setsid" in r for r in enforcement.reasons_for(DEGRADE_ESCAPE))
    finally:
        instance.close()


def test_setsid_daemon_dies_with_the_command_even_without_limits(runner: LandlockRunner, layout: Layout) -> None:
    need_cgroup("pids")
    policy = make_policy(RO, layout[0])  # no limits in the policy
    assert DEGRADE_ESCAPE not in runner.enforcement(policy).degradations
    marker = f"dsh-escape-{os.getpid()}"
    # The substitution ends when the daemon's stdout closes, which its exec does:
    # the command exits only once the daemon is running under its marker name.
    script = f"echo $(setsid -f bash -c 'echo $$; exec -a {marker} sleep 300 >/dev/null')"
    launch = runner.prepare(["bash", "-c", script], policy, cwd=str(layout[0]), env={})
    assert launch.spawn_in is not None and launch.cleanup is not None
    proc = launch.spawn_in(lambda: subprocess.Popen(list(launch.argv), stdout=subprocess.PIPE))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    daemon = int(out)
    launch.cleanup()
    assert _gone_or_reaped(daemon), f"the daemon {daemon} outlived the command"
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def _gone_or_reaped(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")
