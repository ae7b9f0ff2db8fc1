"""SIGTERM, SIGHUP and SIGINT to the CLI stop the command on every runner.

Each test starts the real CLI as a subprocess running ``sleep <marker>``,
waits until the command prints and its process is in the host's process
table (container and emulated-E2B processes are host processes too), sends
the signal and checks that the CLI exits 128+N and that no process carrying
the marker is left.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.support.cli import runner_flags, trusted_config_dir
from tests.support.sandboxed import need_runner

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
START_S = 120  # a cold container or emulated machine may take this long to start
STOP_S = 60


def _with_marker(marker: str) -> list[int]:
    """Host pids with ``marker`` as an argument."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue  # exited meanwhile
        if marker.encode() in argv:
            pids.append(int(entry))
    return pids


def _stop_cli(args: list[str], sig: int, cwd: Path) -> tuple[int, bytes, list[int]]:
    """Run the CLI on ``sh -c 'echo ready; exec sleep <marker>'`` (in place of
    ``{script}`` in ``args``, else after ``--``) and signal it once the command
    runs: (exit status, stderr, pids still carrying the marker)."""
    marker = f"3599.{secrets.randbelow(10**6):06d}"
    script = f"echo ready; exec sleep {marker}"
    if any("{script}" in a for a in args):
        args = [a.replace("{script}", script) for a in args]
    else:
        args = [*args, "--", "sh", "-c", script]
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "dsh.cli", *args],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_S
        while not _with_marker(marker):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the command never ran: {proc.communicate()[1]!r}")
            time.sleep(0.05)
        proc.send_signal(sig)
        status = proc.wait(STOP_S)
        left = _with_marker(marker)
        _, err = proc.communicate()
        return status, err, left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def e2b_composition(tmp_path: Path, workspace: Path) -> Iterator[Path]:
    """A composition for the e2b runner in debug mode on the local envd double."""
    from tests.runners.e2b.conftest import need_sdk

    need_sdk()
    from tests.runners.e2b.envd_server import start_envd_server

    root = tmp_path / "e2b-root"
    root.mkdir()
    url, stop = start_envd_server(root)
    comp = trusted_config_dir() / f"e2b-{tmp_path.name}.yaml"
    comp.write_text(
        f"- {{id: policy, name: sandbox-policy, config: {{mode: read-only, workspace: '{workspace}',"
        " accept_degraded: [e2b-debug]}}\n"
        f"- {{id: sandbox, name: sandbox, config: {{runner: e2b, options: {{e2b: {{sandbox_url: '{url}'}}}}}}}}\n"
        f"- {{id: shell, name: bash-sandbox, config: {{cwd: '{workspace}'}}}}\n"
    )
    try:
        yield comp
    finally:
        stop()
        comp.unlink()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("runner", ["local", "landlock", "bwrap", "docker"])
def test_signal_stops_the_command(runner: str, sig: int, workspace: Path) -> None:
    if runner == "local":
        flags = ["--mode", "danger-full-access"]
    else:
        need_runner(runner)
        flags = ["--mode", "read-only", *runner_flags(runner)]
    status, err, left = _stop_cli(["run", *flags], sig, workspace)
    said = f"{'interrupted' if sig == signal.SIGINT else 'stopped'} by {signal.Signals(sig).name}"
    assert status == 128 + sig, err
    assert f"dsh-sandbox: {said}; what it started was stopped".encode() in err.splitlines()
    assert b"Traceback" not in err
    assert left == [], f"still running after the CLI exited: {left}"


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker"])
def test_a_repository_a_stopped_command_made_is_reported(runner: str, sig: int, workspace: Path) -> None:
    """A command that hangs until it is stopped is the one to look at: the
    repository it made (a planted fsmonitor the host's next git status would
    run) is reported as after any run."""
    need_runner(runner)
    planted = "mkdir sub && cd sub && git init -q && git config core.fsmonitor 'touch /tmp/pwned'"
    status, err, left = _stop_cli(["run", *runner_flags(runner), "-c", f"{planted} && {{script}}"], sig,
                                  workspace)
    assert status == 128 + sig, err
    assert left == [], f"still running after the CLI exited: {left}"
    assert f"{workspace}/sub/.git/config".encode() in err, err
    assert b"created or changed" in err and b"Traceback" not in err


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_signal_stops_the_e2b_command(sig: int, workspace: Path, e2b_composition: Path) -> None:
    status, err, left = _stop_cli(["run", "--composition", str(e2b_composition)], sig, workspace)
    assert status == 128 + sig, err
    assert b"Traceback" not in err
    assert left == [], f"still running in the emulated machine after the CLI exited: {left}"


def test_signal_stops_a_docker_command_and_its_container(workspace: Path) -> None:
    """The container the run made goes with it (``runners --prune`` is not needed)."""
    need_runner("docker")
    before = _containers()
    status, err, left = _stop_cli(["run", "--mode", "read-only", "--runner", "docker", "--keep-warm", "0"],
                                  signal.SIGHUP, workspace)
    assert status == 128 + signal.SIGHUP and left == [], err
    assert _containers() - before == set()


def test_signal_stops_a_docker_command_in_a_kept_container(workspace: Path) -> None:
    """A kept container outlives the stopped run, with nothing of its command in it."""
    need_runner("docker")
    before = _containers()
    status, err, left = _stop_cli(["run", "--mode", "read-only", "--runner", "docker", "--keep-warm", "60"],
                                  signal.SIGHUP, workspace)
    try:
        assert status == 128 + signal.SIGHUP and left == [], err
        kept = _containers() - before
        assert len(kept) == 1, kept
        from dsh.runners.docker.client import connect

        client = connect()
        try:
            top = client.api.top(kept.pop().decode())
        finally:
            client.close()
        args = [row[top["Titles"].index("CMD")] for row in top["Processes"]]
        # docker-init and the keep-alive's shell and sleep: nothing of the command.
        assert args and all(a.startswith(("/sbin/docker-init", "/bin/sh -c while", "sleep 86400")) for a in args), args
    finally:
        subprocess.run(["docker", "rm", "-f", *(c.decode() for c in _containers() - before)], capture_output=True,
                       check=False)


def _containers() -> set[str]:
    done = subprocess.run(["docker", "ps", "-q", "--filter", "label=dsh-sandbox=1"],
                          capture_output=True, check=True, timeout=60)
    return set(done.stdout.split())


@pytest.mark.parametrize("sig", (signal.SIGTERM, signal.SIGHUP), ids=lambda s: signal.Signals(s).name)
def test_signal_stops_a_tool_call(sig: int, workspace: Path) -> None:
    need_runner("bwrap")
    args = ["tool", "call", "bash", '{"command": "{script}", "description": "wait"}',
            "--runner", "bwrap", "--mode", "read-only"]
    status, err, left = _stop_cli(args, sig, workspace)
    assert status == 128 + sig, err
    assert b"Traceback" not in err
    assert left == [], f"still running after the CLI exited: {left}"


def test_a_signal_during_spawn_waits_until_the_process_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM right after ``fork``/``exec`` but before the service recorded
    the process: the exception comes once it is recorded, so teardown kills it."""
    import dsh.executors.process as process_module
    from dsh.cli.signals import Stopped, stop_on_signals
    from dsh.executors.process import LocalSubprocessService

    from tests.support.executors import make_context, start

    real_popen = subprocess.Popen

    def popen_then_signal(*args: object, **kw: object) -> object:
        child = real_popen(*args, **kw)  # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: here
        return child

    marker = f"3599.{secrets.randbelow(10**6):06d}"
    ctx = make_context(tmp_path)
    try:
        monkeypatch.setattr(process_module.subprocess, "Popen", popen_then_signal)
        with stop_on_signals(), pytest.raises(Stopped):
            start(ctx, f"exec sleep {marker}")
        monkeypatch.undo()
        assert len(ctx.require(LocalSubprocessService).live) == 1, "started but unknown to the teardown"
        # The marker is an argument of ``sleep`` only once bash has exec'd it,
        # which a loaded machine may not have done yet.
        deadline = time.monotonic() + 10
        while not _with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _with_marker(marker), "the command should have started"
    finally:
        monkeypatch.undo()
        ctx.close()
    assert _with_marker(marker) == []


def _frame_of(code: object, run: Callable[[], object]) -> FrameType:
    """The frame in which ``run`` executes the function whose code is ``code``."""
    frames: list[FrameType] = []

    def tracer(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            frames.append(frame)

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    assert frames, "the traced function never ran"
    return frames[0]


def test_a_signal_inside_a_lock_handover_is_raised_after_it() -> None:
    """A signal that lands in ``Condition.__enter__`` after the lock was taken,
    before the caller's ``with`` guards it: raised there, the lock would stay
    held and the thread that settles the command would block on it forever
    (the CLI hung).  It is raised a moment later, outside the threading
    module, and the lock is still usable."""
    from dsh.cli.signals import Stopped, stop_on_signals

    cond = threading.Condition()
    enter = _frame_of(threading.Condition.__enter__.__code__, cond.__enter__)
    cond.release()
    reached = False
    started = time.monotonic()
    with pytest.raises(Stopped), stop_on_signals():
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, enter)  # what the interpreter would call there
        reached = True
        while time.monotonic() - started < 5:
            time.sleep(0.01)
    assert reached, "raised inside the threading module"
    assert time.monotonic() - started < 2, "the held signal was not raised soon after"
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL  # the retry timer is gone with the block
    assert cond.acquire(timeout=1)
    cond.release()


def test_a_signal_during_a_long_wait_is_raised_at_once() -> None:
    """Waiting on an Event is where the CLI spends a command's lifetime: that
    wait sits inside a try/finally, so the signal is not held until it ends."""
    from dsh.cli.signals import Stopped, stop_on_signals

    main = threading.get_ident()
    event = threading.Event()
    sender = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGTERM))
    started = time.monotonic()
    with pytest.raises(Stopped), stop_on_signals():
        sender.start()
        event.wait(30)
    sender.join()
    assert time.monotonic() - started < 5
    setter = threading.Thread(target=event.set)
    setter.start()
    setter.join(5)
    assert not setter.is_alive(), "the Event's lock was left held"
