"""Nothing outlives the CLI on Docker: a container dies within moments of the
``dsh-sandbox`` process that made it, under SIGKILL too, and any later run
reaps the containers of this user's dead sessions, never a live one's or
another user's.  Real CLI processes against the real daemon."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.runners.docker import client as dc
from dsh.runners.docker.keeper import KEEPER_NAME

from tests.support.cli import cli
from tests.support.processes import pids_with
from tests.support.require import require_runner
from tests.support.wait import wait_until

LOOP = "while :; do date >> f; sleep 0.2; done"
#: "Within a few seconds" of the CLI's death, on a loaded two-core machine.
GONE_WITHIN_S = 20.0


@pytest.fixture
def daemon() -> Iterator[Any]:
    require_runner("docker")
    client = dc.connect()
    try:
        yield client
    finally:
        client.close()


def _owned_by(client: Any, pid: int) -> list[str]:
    found = client.api.containers(all=True, filters={"label": f"{dc.LABEL_OWNER_PID}={pid}"})
    return [str(c["Id"]) for c in found]


def _exists(client: Any, cid: str) -> bool:
    from docker.errors import NotFound  # type: ignore[import-untyped]

    try:
        client.api.inspect_container(cid)
    except NotFound:
        return False
    return True


def _lines(path: Path) -> int:
    try:
        return len(path.read_bytes().splitlines())
    except FileNotFoundError:
        return 0


def _start_loop(workspace: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        # A container not kept: it is this CLI's own (test_kept_containers covers a kept one).
        [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "docker", "--mode", "workspace-write",
         "--keep-warm", "0", "--", "sh", "-c", LOOP],
        cwd=workspace, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)


def _running(client: Any, cli_proc: subprocess.Popen[bytes], workspace: Path) -> str:
    """The CLI's one container, once the command in it has written twice."""
    wait_until(lambda: _lines(workspace / "f") >= 2 or cli_proc.poll() is not None, "the command's first lines")
    assert cli_proc.poll() is None, cli_proc.stderr.read() if cli_proc.stderr else b""
    owned = _owned_by(client, cli_proc.pid)
    assert len(owned) == 1, owned
    return owned[0]


def _keeper_of(cli_pid: int) -> int:
    """The pid of the CLI's container keeper (a child of the CLI)."""
    for pid in pids_with(KEEPER_NAME):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == cli_pid:
            return pid
    raise AssertionError(f"no container keeper under the CLI {cli_pid}")


def _stops_growing(path: Path) -> None:
    # Observation, not synchronisation: the container is gone, so nothing may
    # write any more; a second later the file must be as it was.
    before = _lines(path)
    time.sleep(1.0)
    assert _lines(path) == before, "the command kept writing after its container was removed"


def test_a_killed_cli_takes_its_container_and_command_along(daemon: Any, workspace: Path) -> None:
    proc = _start_loop(workspace)
    try:
        cid = _running(daemon, proc, workspace)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_until(lambda: not _exists(daemon, cid), "the container of a SIGKILLed CLI to be removed",
                   timeout=GONE_WITHIN_S)
        _stops_growing(workspace / "f")
    finally:
        proc.kill()
        proc.wait()
        for cid in _owned_by(daemon, proc.pid):
            dc.remove_container(daemon, cid)


def test_the_next_run_reaps_a_container_whose_cli_and_keeper_died(daemon: Any, workspace: Path) -> None:
    proc = _start_loop(workspace)
    try:
        cid = _running(daemon, proc, workspace)
        keeper = _keeper_of(proc.pid)
        os.kill(keeper, signal.SIGKILL)  # the keeper first: nothing removes the container now
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_until(lambda: keeper not in pids_with(KEEPER_NAME), "the keeper's end")
        assert _exists(daemon, cid) and _lines(workspace / "f") > 0
        done = cli("run", "--runner", "docker", "--mode", "read-only", "--", "true", cwd=workspace)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: not _exists(daemon, cid), "the next run to reap the dead session's container")
        _stops_growing(workspace / "f")
    finally:
        proc.kill()
        proc.wait()
        for cid in _owned_by(daemon, proc.pid):
            dc.remove_container(daemon, cid)


def _dead_pid() -> tuple[int, str]:
    """A pid and start time that were a process of this user's and are no more."""
    gone = subprocess.Popen(["true"])
    start = dc.process_start_time(gone.pid)
    gone.wait()
    return gone.pid, start or "1"


def _labelled(client: Any, image: str, **labels: str) -> str:
    full = {**dc.owner_labels(), **labels}
    container = client.containers.create(image, ["/bin/sh", "-c", "sleep 600"], labels=full,
                                         network_mode="none", detach=True)
    container.start()
    return str(container.id)


def test_a_run_reaps_only_this_users_dead_sessions(daemon: Any, workspace: Path) -> None:
    """Made with the labels a session gives its container: a dead owner of this
    user's is reaped; a live owner's, another user's and another host's are not."""
    image = dc.DEFAULT_IMAGE
    pid, start = _dead_pid()
    alive = subprocess.Popen(["sleep", "600"])
    dead = {dc.LABEL_OWNER_PID: str(pid), dc.LABEL_OWNER_START: start}
    made: dict[str, str] = {}
    try:
        made["dead"] = _labelled(daemon, image, **dead)
        made["live"] = _labelled(daemon, image, **{dc.LABEL_OWNER_PID: str(alive.pid),
                                                    dc.LABEL_OWNER_START: dc.process_start_time(alive.pid) or ""})
        made["other-user"] = _labelled(daemon, image, **dead, **{dc.LABEL_OWNER_UID: str(os.getuid() + 4242)})
        made["other-host"] = _labelled(daemon, image, **dead, **{dc.LABEL_OWNER_HOST: socket.gethostname() + "-x"})
        made["pid-reused"] = _labelled(daemon, image, **{dc.LABEL_OWNER_PID: str(alive.pid),
                                                          dc.LABEL_OWNER_START: start + "0"})
        done = cli("run", "--runner", "docker", "--mode", "read-only", "--", "true", cwd=workspace)
        assert done.returncode == 0, done.stderr
        left = {name for name, cid in made.items() if _exists(daemon, cid)}
        assert left == {"live", "other-user", "other-host"}
    finally:
        alive.kill()
        alive.wait()
        for cid in made.values():
            dc.remove_container(daemon, cid)


def test_a_live_sessions_container_is_never_reaped(daemon: Any, workspace: Path) -> None:
    proc = _start_loop(workspace)
    cid = None
    try:
        cid = _running(daemon, proc, workspace)
        other = workspace / "other"
        other.mkdir()
        done = cli("run", "--runner", "docker", "--mode", "read-only", "--", "true", cwd=other)
        assert done.returncode == 0, done.stderr
        assert _exists(daemon, cid)
        grown = _lines(workspace / "f")
        wait_until(lambda: _lines(workspace / "f") > grown, "the live session's command to go on writing")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        if cid is not None:
            wait_until(lambda: not _exists(daemon, cid), "the container's removal after the CLI stopped")


def test_a_keeper_that_died_is_replaced_and_takes_over_the_list(daemon: Any) -> None:
    """Killed by hand or by the OOM killer mid-session: the next container starts
    a new keeper, which holds the earlier containers too."""
    from dsh.runners.docker.keeper import DockerKeeper

    keeper = DockerKeeper()
    made: list[str] = []
    try:
        made.append(_labelled(daemon, dc.DEFAULT_IMAGE))
        keeper.add(made[0])
        first = keeper.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: first not in pids_with(KEEPER_NAME), "the first keeper's end")
        made.append(_labelled(daemon, dc.DEFAULT_IMAGE))
        keeper.add(made[1])
        assert keeper.pid not in (None, first)
        keeper.close()  # as if this process died: the new keeper removes both
        wait_until(lambda: not any(_exists(daemon, cid) for cid in made), "both containers' removal")
    finally:
        keeper.close()
        for cid in made:
            dc.remove_container(daemon, cid)


def test_the_keeper_is_out_of_the_commands_reach(workspace: Path) -> None:
    """The command cannot signal the keeper (another pid namespace, the host's
    pid means nothing in the container), and a signal to the caller's process
    group (a terminal's ^C) does not reach it either: its own session."""
    from tests.runners.docker.helpers import docker_runner, policy, run

    with docker_runner() as runner:
        assert run(runner, ["true"], policy(workspace)).status.exit_code == 0
        keeper = runner._keeper.pid
        assert keeper is not None
        script = f"for s in KILL TERM INT HUP; do kill -$s {keeper} 2>/dev/null && echo SENT-$s; done; true"
        result = run(runner, ["sh", "-c", script], policy(workspace))
        assert result.status.exit_code == 0 and b"SENT" not in result.stdout, result.stdout
        assert os.getsid(keeper) == keeper != os.getsid(0)
        os.killpg(keeper, 0)  # still there (raises if gone)
        state = Path(f"/proc/{keeper}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in ("S", "R"), state
