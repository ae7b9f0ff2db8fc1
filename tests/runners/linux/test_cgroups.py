"""The shared cgroup module against the real cgroupfs (root): where this process
lives, command cgroups that hold and kill everything (v1 and v2), no signal to a
process outside, reuse of idle cgroups, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.linux.cgroupfs import signal_if_member
from dsh.runners.linux.cgroups import CgroupSession, CommandCgroup, Limits, discover, join_args

from tests.support.require import need_cgroup
from tests.support.wait import wait_until

DAEMONS = "setsid -f sleep 300; (sleep 300 &); nohup sleep 300 >/dev/null 2>&1 & exec sleep 300"


@pytest.fixture(params=[(1,), (2,), (1, 2)], ids=["v1", "v2", "hybrid"])
def session(request: pytest.FixtureRequest) -> Iterator[CgroupSession]:
    versions: tuple[int, ...] = request.param
    need_cgroup(versions=versions)
    made = CgroupSession(f"dsh-test-{uuid.uuid4().hex[:6]}", versions=versions, keeper=False)
    assert made.holds
    yield made
    made.close()
    assert all(not d.exists() for _, d in made.dirs.values())


def _start(group: CommandCgroup, script: str = DAEMONS) -> subprocess.Popen[bytes]:
    fds = group.open_procs()
    try:
        return subprocess.Popen([*join_args(fds), "sh", "-c", script], pass_fds=fds, start_new_session=True)
    finally:
        for fd in fds:
            os.close(fd)


def test_discover_matches_proc_self_cgroup() -> None:
    table = Path("/proc/self/cgroup").read_text().splitlines()
    found = discover()
    assert found, "no cgroup hierarchy found"
    for hierarchy in found:
        (line,) = [ln for ln in table if hierarchy.holds(ln)]
        assert hierarchy.own == line.split(":", 2)[2]
        assert hierarchy.own_dir.is_dir() and (hierarchy.own_dir / "cgroup.procs").exists()
        assert hierarchy.cgroup_of(hierarchy.own_dir) == hierarchy.own


def test_every_process_is_held_and_killed(session: CgroupSession) -> None:
    group = session.command()
    proc = _start(group)
    wait_until(lambda: len(group.pids()) >= 4, lambda: f"four processes in the cgroup: {group.pids()}")
    held = group.pids()
    assert len(held) >= 4, held  # the command and its setsid, double-fork and nohup children
    for pid in held:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        for hierarchy, path in group.dirs:
            assert [ln.split(":", 2)[2] for ln in lines if hierarchy.holds(ln)] == [hierarchy.cgroup_of(path)]
    group.kill(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert group.pids() == set()
    assert all(not os.path.exists(f"/proc/{pid}/cmdline") or not Path(f"/proc/{pid}/cmdline").read_bytes()
               for pid in held)  # gone (at most zombies not yet reaped by their new parent)


def test_a_fork_bomb_is_killed_whole(session: CgroupSession) -> None:
    if session.version_of("pids") is None:
        pytest.skip("SANDBOX_UNAVAILABLE: no pids controller in this hierarchy")
    group = session.command(Limits(pids_max=40))
    proc = _start(group, "b() { b | b & }; b; sleep 300")
    wait_until(lambda: len(group.pids()) >= 2, "the bomb to spread")
    group.kill(signal.SIGKILL)
    proc.wait(timeout=30)
    assert group.pids() == set()
    session.release(group)


def test_a_process_outside_is_never_signalled(session: CgroupSession) -> None:
    """The pid a kill read may be recycled by then: only members are signalled."""
    group = session.command()
    outsider = subprocess.Popen(["sleep", "300"])
    try:
        for hierarchy, path in group.dirs:
            # As if the outsider's pid had been read from this cgroup.procs.
            signal_if_member(outsider.pid, hierarchy, hierarchy.cgroup_of(path), signal.SIGKILL)
        # A signal sent above would be pending before this one: the first to be
        # delivered decides the status, so no wait is needed to see it.
        outsider.terminate()
        assert outsider.wait(timeout=60) == -signal.SIGTERM
    finally:
        outsider.kill()
        outsider.wait()
        session.release(group)


def test_idle_cgroups_are_reused_and_limits_are_kept_apart(session: CgroupSession) -> None:
    plain = session.command()
    session.release(plain)
    again = session.command()
    assert again is plain  # no mkdir on the next command
    session.release(again)
    if session.version_of("pids") is not None:
        limited = session.command(Limits(pids_max=7))
        assert limited is not plain
        path = limited.path("pids") or limited.path("v2")
        assert path is not None and (path / "pids.max").read_text().strip() == "7"
        session.release(limited)


def test_a_limit_that_cannot_be_set_is_an_error(session: CgroupSession) -> None:
    if session.version_of("memory") is not None:
        pytest.skip("SANDBOX_UNAVAILABLE: this hierarchy has a memory controller")
    with pytest.raises(OSError, match="memory"):
        session.command(Limits(memory_max=1 << 30))


def test_discover_reads_other_layouts(tmp_path: Path) -> None:
    """Hosts this machine is not: v2 only inside a cgroup namespace, and v1 with co-mounted controllers."""
    (tmp_path / "cgroup").write_text("0::/user.slice/app\n")
    (tmp_path / "mountinfo").write_text(
        "30 25 0:26 /user.slice /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    (v2,) = discover(str(tmp_path))
    assert (v2.version, v2.key, v2.own_dir) == (2, "v2", Path("/sys/fs/cgroup/app"))
    assert v2.cgroup_of(Path("/sys/fs/cgroup/app/dsh/cmd-1")) == "/user.slice/app/dsh/cmd-1"
    (tmp_path / "cgroup").write_text("5:memory,pids:/a\n3:freezer:/\n0::/\n")
    (tmp_path / "mountinfo").write_text(
        "40 25 0:30 / /sys/fs/cgroup/memory,pids rw - cgroup cgroup rw,memory,pids\n"
        "41 25 0:31 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
    )
    found = {h.key: h for h in discover(str(tmp_path))}
    assert set(found) == {"pids", "freezer"}  # no v2 mount: none
    assert found["pids"].controllers == ("memory", "pids")
    assert found["pids"].own_dir == Path("/sys/fs/cgroup/memory,pids/a")
