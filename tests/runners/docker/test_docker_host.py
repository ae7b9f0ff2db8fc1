"""``DOCKER_HOST`` is honoured, including a TCP daemon address (how users scale out).

The daemon here listens on its unix socket only, so the test puts a small TCP
forwarder in front of it and points ``DOCKER_HOST`` at ``tcp://127.0.0.1:PORT``:
the real SDK then talks HTTP over TCP, including the hijacked exec stream and
the half-close that ends stdin.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.docker import DockerRunner

from tests.runners.docker.helpers import docker_runner, policy, run

DAEMON_SOCKET = "/var/run/docker.sock"


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)  # pass the half-close on


@contextlib.contextmanager
def tcp_forwarder() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(DAEMON_SOCKET)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()


def test_tcp_docker_host_runs_commands(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with docker_runner():
        pass  # skips (or fails in CI) without a local daemon to forward to
    if not Path(DAEMON_SOCKET).is_socket():
        pytest.skip(f"SANDBOX_UNAVAILABLE: docker: no daemon socket at {DAEMON_SOCKET} to forward")
    with tcp_forwarder() as port:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
        with docker_runner() as runner:
            probe = runner.probe()
            assert probe.details["docker_host"] == f"tcp://127.0.0.1:{port}"
            assert probe.details["local"] is False
            result = run(runner, ["/bin/sh", "-c", "cat; echo err >&2; exit 5"],
                         policy(workspace), stdin=b"through tcp")
    assert result.status.exit_code == 5
    assert result.stdout == b"through tcp" and result.stderr == b"err\n"


def test_docker_host_is_read_at_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    probe = DockerRunner().probe()
    assert not probe.available and probe.reason is not None
    assert "tcp://127.0.0.1:1" in probe.reason


@pytest.mark.parametrize("parent_mode", [0o755, 0o700])
def test_a_socket_this_user_may_not_use_gets_the_group_advice_not_start_it(trusted_dir: Path,
                                                                         parent_mode: int) -> None:
    # The daemon runs; the user is not in its group: "start it" would send them
    # looking for a problem that is not there.
    import os
    import subprocess

    from tests.support.runners import nobody_python

    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    python = nobody_python()
    if python is None:
        pytest.skip("SANDBOX_UNAVAILABLE: DSH_NOBODY_PYTHON is not set (an interpreter nobody can run)")
    sock = trusted_dir / "private.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock))
        os.chmod(sock, 0o660)
        os.chmod(trusted_dir, parent_mode)
        out = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python, "-c",
             "from dsh.runners.docker.client import connect\n"
             "try:\n    connect(timeout=5)\nexcept Exception as e:\n    print(e)\n"],
            env={"DOCKER_HOST": f"unix://{sock}", "PATH": os.environ["PATH"]}, capture_output=True, text=True,
            timeout=60)
    assert f"socket {sock} is not open to this user" in out.stdout and "docker group" not in out.stdout, out
    assert "usermod -aG docker" in out.stdout and "start it" not in out.stdout, out
