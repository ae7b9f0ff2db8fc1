"""Containment by cgroup, checked from the host: a sandboxed command cannot move
itself out of its cgroup, and nothing it starts (setsid, a double fork, nohup)
outlives a supervisor killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.limits import DEGRADE_ESCAPE
from dsh.runners.linux import cgroups
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import LocalLaunch

from tests.support.processes import pids_where
from tests.support.require import need_cgroup, require_runner
from tests.support.runners import nobody_python
from tests.support.wait import wait_until

SUPERVISOR = Path(__file__).with_name("supervisor.py")
# (runner, limits, cgroup versions): every way a command ends up held.  Without a
# writable cgroup bwrap still holds (pid namespace, --die-with-parent, setpriv
# --pdeathsig); Landlock declares the gap instead (tested below).
SETUPS = [
    pytest.param("landlock", "-", "1,2", id="landlock"),
    pytest.param("landlock", "-", "2", id="landlock-v2-only"),
    pytest.param("bwrap", "-", "1,2", id="bwrap"),
    pytest.param("bwrap", "wall_time_s=600", "1,2", id="bwrap-wall-time"),
    # Without a pids cgroup, a process limit is RLIMIT_NPROC, shared with every process of the user.
    pytest.param("bwrap", "max_processes=50", "1,2", id="bwrap-pids-cgroup"),
    pytest.param("bwrap", "max_processes=50,wall_time_s=600", "1,2", id="bwrap-pids-cgroup-wall-time"),
]


def _versions(listed: str) -> tuple[int, ...]:
    return tuple(int(v) for v in listed.split(","))


def _marked(marker: str) -> list[int]:
    """Host pids whose argv[0] is ``marker`` (``exec -a``)."""
    return pids_where(lambda cmdline: cmdline.startswith(marker.encode() + b"\0"))


def _session_dirs(tag: str) -> list[Path]:
    return [p for h in cgroups.discover() for p in h.own_dir.glob(f"{tag}-*")]


def _daemons(marker: str) -> str:
    return (
        f"setsid -f bash -c 'exec -a {marker} sleep 300'; "
        f"nohup bash -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 & "
        f"bash -c '(bash -c \"exec -a {marker} sleep 300\" &)'; "
        f"exec -a {marker} sleep 300"
    )


@pytest.mark.parametrize(("name", "limits", "versions"), SETUPS)
def test_nothing_outlives_a_killed_supervisor(name: str, limits: str, versions: str, tmp_path: Path) -> None:
    require_runner(name)
    if name == "landlock":
        need_cgroup(versions=_versions(versions))
    elif "max_processes" in limits:
        need_cgroup("pids", versions=_versions(versions))
    marker = f"dsh-orphan-{uuid.uuid4().hex[:10]}"
    supervisor = subprocess.Popen(
        [sys.executable, str(SUPERVISOR), name, str(tmp_path), limits, versions, "--", "bash", "-c", _daemons(marker)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert supervisor.stdout is not None and supervisor.stdout.readline().strip().isdigit()
        wait_until(lambda: len(_marked(marker)) >= 4, "the command to start its daemons")
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=60)
        wait_until(lambda: not _marked(marker), lambda: f"the daemons to die with the supervisor: {_marked(marker)}")
        prefix = f"dsh-{name}-{supervisor.pid}"
        wait_until(lambda: not _session_dirs(prefix), "the keeper to remove the session too")
    finally:
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


ESCAPE = r"""
import glob, os, sys
moved = []
for pattern in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/*/cgroup.procs", "/sys/fs/cgroup/*/tasks",
                "/sys/fs/cgroup/*/*/cgroup.procs", "/sys/fs/cgroup/*/*/*/cgroup.procs",
                "/sys/fs/cgroup/*/*/*/*/cgroup.procs", "/sys/fs/cgroup/*/*/*/*/*/cgroup.procs"):
    for path in glob.glob(pattern):
        if "/cmd-" in path:
            continue  # its own cgroup: staying is no escape
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
            moved.append(path)
        except OSError:
            pass
print("MOVED", moved, flush=True)
os.execvp("sleep", [sys.argv[1], "300"])
"""


@pytest.fixture(params=["landlock", "landlock-v2-only", "bwrap"])
def held(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, object]]:
    """A runner whose commands get a cgroup (bwrap: through a process limit)."""
    name = str(request.param)
    need_cgroup(*(("pids",) if name == "bwrap" else ()), versions=(2,) if name == "landlock-v2-only" else (1, 2))
    if name == "landlock-v2-only":
        import dsh.runners.landlock.runner as module

        monkeypatch.setattr(module, "CgroupSession", lambda tag: cgroups.CgroupSession(tag, versions=(2,)))
    runner = BwrapRunner() if name == "bwrap" else LandlockRunner()
    require_runner(runner.name, runner)
    yield name, runner
    runner.close()


def test_the_command_cannot_leave_its_cgroup(held: tuple[str, LandlockRunner | BwrapRunner], tmp_path: Path) -> None:
    name, runner = held
    marker = f"dsh-stay-{uuid.uuid4().hex[:10]}"
    limits = ResourceLimits(max_processes=50) if name == "bwrap" else ResourceLimits()
    policy = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=tmp_path, limits=limits,
                           accept_degraded=("landlock-process-list",))  # no pid namespace there
    launch = runner.prepare([sys.executable, "-c", ESCAPE, marker], policy, cwd=str(tmp_path), env={})
    assert isinstance(launch, LocalLaunch)

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(launch.argv), pass_fds=launch.pass_fds, stdout=subprocess.PIPE)

    proc = launch.spawn_in(spawn) if launch.spawn_in is not None else spawn()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("MOVED []"), line
        wait_until(lambda: _marked(marker), "the command to start")
        (pid,) = _marked(marker)
        group = launch.cleanup.__self__.group if name == "bwrap" else launch.cleanup.__self__.cgroup  # type: ignore[union-attr]
        assert group.dirs  # held at all
        table = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        for hierarchy, path in group.dirs:
            mine = [ln.split(":", 2)[2] for ln in table if hierarchy.holds(ln)]
            assert mine == [hierarchy.cgroup_of(path)], (hierarchy.key, mine)
        if name == "landlock-v2-only":
            assert [h.version for h, _ in group.dirs] == [2]
    finally:
        if launch.kill_tree is not None:
            launch.kill_tree(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        if launch.cleanup is not None:
            launch.cleanup()
    assert _marked(marker) == []


def test_without_a_writable_cgroup_the_escape_is_declared() -> None:
    """As a user cgroups are not delegated to (nobody here), Landlock declares the gap."""
    # Self-contained: nobody may not be able to read this checkout (e.g. under /root).
    code = (
        "from pathlib import Path\n"
        "from dsh.runners.landlock import LandlockRunner\n"
        "from dsh.sandbox.modes import SandboxMode\n"
        "from dsh.sandbox.policy import SandboxPolicy\n"
        "runner = LandlockRunner()\n"
        "e = runner.enforcement(SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=Path('/')))\n"
        f"print((*e.degradations, *e.reasons_for({DEGRADE_ESCAPE!r})))\n"
        "runner.close()\n"
    )
    if os.geteuid() != 0:  # already a user without cgroups: plan here
        stdout = "\n".join(_escape_gap("/"))
    else:
        python = nobody_python() or sys.executable
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", python, "-c", code]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")
        assert done.returncode == 0, done.stderr
        stdout = done.stdout
    assert DEGRADE_ESCAPE in stdout
    assert "not delegated to this user" in stdout


def _escape_gap(workspace: str) -> tuple[str, ...]:
    runner = LandlockRunner()
    try:
        e = runner.enforcement(SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=Path(workspace)))
        return (*e.degradations, *e.reasons_for(DEGRADE_ESCAPE))
    finally:
        runner.close()


def test_the_keeper_is_out_of_the_commands_reach(tmp_path: Path) -> None:
    """The command cannot stop or kill the process that would clean up after a dead supervisor."""
    need_cgroup()
    runner = LandlockRunner()
    require_runner("landlock", runner)
    try:
        policy = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=tmp_path,
                               accept_degraded=("landlock-process-list",))  # no pid namespace there
        first = runner.prepare(["true"], policy, cwd=str(tmp_path), env={})  # starts the session
        assert first.spawn_in is not None and first.cleanup is not None
        first.spawn_in(lambda: subprocess.run(list(first.argv), check=True))
        first.cleanup()
        session = runner._cgroups
        assert session is not None and session._keeper is not None
        keeper = session._keeper.process
        script = f"for s in KILL TERM STOP INT HUP; do kill -$s {keeper.pid} && echo SENT-$s; done; true"
        launch = runner.prepare(["bash", "-c", script], policy, cwd=str(tmp_path), env={})
        assert launch.spawn_in is not None and launch.cleanup is not None
        done = launch.spawn_in(lambda: subprocess.run(list(launch.argv), capture_output=True, text=True, timeout=60))
        launch.cleanup()
        assert "SENT" not in done.stdout, done.stdout
        time.sleep(0.2)
        assert keeper.poll() is None
        state = Path(f"/proc/{keeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in ("S", "R"), state
    finally:
        runner.close()
