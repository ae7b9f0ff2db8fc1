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
