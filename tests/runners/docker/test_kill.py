"""Kill: Docker has none for execs; the runner kills the exec's tree in the container."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from dsh.runners.docker import DockerRunner
from dsh.runners.docker import process as docker_process
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy

from tests.runners.docker.helpers import container_of, docker_runner, policy, run, sh, start
from tests.support.wait import PATIENCE_S, wait_until

# A tree that ignores SIGTERM, double-forks a daemon into its own session, and
# has a child that cleared its environment (so no marker variable).
STUBBORN = (
    "trap '' TERM; "
    "( trap '' TERM; setsid sh -c 'trap \"\" TERM; exec sleep 4241' & ) ; "
    "env -i /bin/sh -c 'trap \"\" TERM; sleep 4242 & wait' & "
    "echo ready; sleep 4243"
)
SLEEPS = ["sleep 4241", "sleep 4242", "sleep 4243"]


def _processes(runner: DockerRunner, pol: SandboxPolicy, wanted: list[str]) -> list[str]:
    """Command lines of the container's live processes that are exactly in ``wanted``."""
    listing = sh(runner, "for d in /proc/[0-9]*; do "
                 "grep -q '^State:.*Z' $d/status 2>/dev/null && continue; "
                 "tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done", pol).stdout.decode()
    return sorted(line.strip() for line in listing.splitlines() if line.strip() in wanted)


def _await_processes(runner: DockerRunner, pol: SandboxPolicy, wanted: list[str]) -> None:
    wait_until(lambda: _processes(runner, pol, wanted) == sorted(wanted), f"{wanted} all to run")


def test_kill_takes_the_whole_tree(workspace: Path) -> None:
    pol = policy(workspace)
    with docker_runner() as runner:
        proc, reader = start(runner, ["/bin/bash", "-c", STUBBORN], pol)
        assert reader.first_line.wait(PATIENCE_S), "the tree never got ready"
        _await_processes(runner, pol, SLEEPS)
        assert proc.wait(0) is None
        proc.kill(signal.SIGTERM)  # ignored by every member
        assert proc.wait(0.5) is None
        assert _processes(runner, pol, SLEEPS) == SLEEPS
        proc.kill(signal.SIGKILL)
        result = reader.finish()
        assert result.status.exit_code is None and result.status.signal == signal.SIGKILL
        assert result.stdout == b"ready\n"
        assert _processes(runner, pol, SLEEPS) == []


def test_sigterm_is_reported_as_a_signal(workspace: Path) -> None:
    with docker_runner() as runner:
        proc, reader = start(runner, ["/bin/sh", "-c", "echo ready; exec sleep 4250"],
                             policy(workspace))
        assert reader.first_line.wait(PATIENCE_S)
        proc.kill(signal.SIGTERM)
        result = reader.finish()
    assert result.status.exit_code is None and result.status.signal == signal.SIGTERM


def test_kill_touches_only_its_own_command(workspace: Path) -> None:
    pol = policy(workspace)
    with docker_runner() as runner:
        victim, victim_reader = start(runner, ["/bin/sh", "-c", "exec sleep 4260"], pol)
        other, other_reader = start(runner, ["/bin/sh", "-c", "exec sleep 4261"], pol)
        _await_processes(runner, pol, ["sleep 4260", "sleep 4261"])
        victim.kill(signal.SIGKILL)
        assert victim_reader.finish().status.signal == signal.SIGKILL
        _await_processes(runner, pol, ["sleep 4261"])
        assert other.wait(0) is None
        other.kill(signal.SIGKILL)
        assert other_reader.finish().status.signal == signal.SIGKILL


def test_exit_code_137_without_a_kill_stays_an_exit_code(workspace: Path) -> None:
    with docker_runner() as runner:
        plain = run(runner, ["/bin/sh", "-c", "exit 137"], policy(workspace))
        self_killed = run(runner, ["/bin/sh", "-c", "kill -9 $$"], policy(workspace))
    assert plain.status.exit_code == 137 and plain.status.signal is None
    # Docker reports a death by signal as 128+N; the runner did not send it.
    assert self_killed.status.exit_code == 137


def test_kill_after_exit_is_harmless(workspace: Path) -> None:
    with docker_runner() as runner:
        proc, reader = start(runner, ["true"], policy(workspace))
        status = proc.wait(PATIENCE_S)
        proc.kill(signal.SIGKILL)
        assert proc.wait(0) == status
        reader.finish()
        assert run(runner, ["echo", "still up"], policy(workspace)).stdout == b"still up\n"


def test_kill_finds_a_command_that_cleared_its_environment(workspace: Path) -> None:
    # No process carries the marker variable: the wrapper's pid file finds the root.
    pol = policy(workspace)
    argv = ["env", "-i", "/bin/sh", "-c", "trap '' TERM; sleep 4270 & exec sleep 4271"]
    with docker_runner() as runner:
        proc, reader = start(runner, argv, pol)
        _await_processes(runner, pol, ["sleep 4270", "sleep 4271"])
        proc.kill(signal.SIGKILL)
        assert reader.finish().status.signal == signal.SIGKILL
        assert _processes(runner, pol, ["sleep 4270", "sleep 4271"]) == []


def test_kill_works_when_every_pid_is_taken(workspace: Path) -> None:
    # The killer forks nothing (bash builtins only), so it runs even then.
    pol = policy(workspace, limits=ResourceLimits(max_processes=40))
    hog = ("f=/sys/fs/cgroup/pids; [ -e $f/pids.max ] || f=/sys/fs/cgroup; "
           "read max < $f/pids.max; read cur < $f/pids.current; "
           "for ((i = cur; i < max; i++)); do sleep 4290 & done; echo ready; wait")
    with docker_runner() as runner:
        proc, reader = start(runner, ["/bin/bash", "-c", hog], pol)
        assert reader.first_line.wait(PATIENCE_S)
        no_fork = run(runner, ["/bin/sh", "-c", "/bin/true & wait"], pol)
        assert no_fork.status.exit_code != 0, no_fork  # really no pid left
        proc.kill(signal.SIGKILL)
        assert reader.finish().status.signal == signal.SIGKILL
        assert _processes(runner, pol, ["sleep 4290"]) == []


def test_unkillable_exec_takes_its_container_down(workspace: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # When the in-container killer cannot finish, SIGKILL falls back to killing
    # the container; the next command gets a fresh one.
    pol = policy(workspace)
    with docker_runner() as runner:
        proc, reader = start(runner, ["/bin/sh", "-c", "exec sleep 4295"], pol)
        _await_processes(runner, pol, ["sleep 4295"])
        first = container_of(runner)
        monkeypatch.setattr(docker_process, "KILLER", "exit 3")  # a killer that always fails
        proc.kill(signal.SIGKILL)
        monkeypatch.undo()
        assert reader.finish().status.signal == signal.SIGKILL
        assert run(runner, ["echo", "alive"], pol).stdout == b"alive\n"
        assert container_of(runner) != first


def test_what_a_command_leaves_running_dies_when_it_exits(workspace: Path) -> None:
    pol = policy(workspace)
    with docker_runner() as runner:
        result = sh(runner, "setsid -f sh -c 'touch up1; exec sleep 4300'; "
                    "nohup sh -c 'touch up2; exec sleep 4301' >/dev/null 2>&1 & "
                    "while [ ! -e up1 ] || [ ! -e up2 ]; do sleep 0.05; done; echo left", pol)
        assert result.stdout == b"left\n"
        assert _processes(runner, pol, ["sleep 4300", "sleep 4301"]) == []
