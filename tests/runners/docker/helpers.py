"""Drive the docker runner's ``RemoteProcess`` directly, like the subprocess service."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.runners.docker import DockerRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import ExitStatus, RemoteLaunch, RemoteProcess

from tests.conftest import require_runner

ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
WAIT_S = 120.0  # generous: 2 cores shared by many test runs


@dataclass(frozen=True)
class Result:
    status: ExitStatus
    stdout: bytes
    stderr: bytes


def policy(workspace: Path, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE,
           **kwargs: Any) -> SandboxPolicy:
    roots = (workspace,) if mode is not SandboxMode.READ_ONLY else ()
    kwargs.setdefault("writable_roots", roots)
    kwargs.setdefault("limits", ResourceLimits())
    return SandboxPolicy(mode=mode, workspace=workspace, **kwargs)


@contextmanager
def docker_runner(options: Mapping[str, Any] | None = None) -> Iterator[DockerRunner]:
    runner = DockerRunner(options)
    require_runner("docker", runner)
    try:
        yield runner
    finally:
        runner.close()


class Reader:
    """Reads both fds of a ``RemoteProcess`` in threads (no pipe-full deadlock)."""

    def __init__(self, proc: RemoteProcess) -> None:
        self.data = {proc.stdout_fd: bytearray(), proc.stderr_fd: bytearray()}
        self.threads = [threading.Thread(target=self._read, args=(fd,), daemon=True)
                        for fd in self.data]
        self.first_line = threading.Event()
        for thread in self.threads:
            thread.start()
        self.proc = proc

    def _read(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 65536):
                self.data[fd] += chunk
                if b"\n" in chunk:
                    self.first_line.set()
        finally:
            os.close(fd)

    def finish(self) -> tuple[bytes, bytes]:
        for thread in self.threads:
            thread.join(WAIT_S)
            assert not thread.is_alive(), "output stream did not end"
        return bytes(self.data[self.proc.stdout_fd]), bytes(self.data[self.proc.stderr_fd])


def start(runner: DockerRunner, argv: Sequence[str | bytes], pol: SandboxPolicy, *,
          cwd: Path | str | None = None, env: Mapping[str, str] = ENV,
          stdin: bytes | None = None) -> tuple[RemoteProcess, Reader]:
    launch = runner.prepare(argv, pol, cwd=str(cwd or pol.workspace), env=env)
    assert isinstance(launch, RemoteLaunch)
    proc = launch.start(stdin, None)
    return proc, Reader(proc)


def finish(proc: RemoteProcess, reader: Reader) -> Result:
    status = proc.wait(WAIT_S)
    assert status is not None, "command did not finish"
    out, err = reader.finish()
    proc.close()
    return Result(status, out, err)


def run(runner: DockerRunner, argv: Sequence[str | bytes], pol: SandboxPolicy, *,
        cwd: Path | str | None = None, env: Mapping[str, str] = ENV,
        stdin: bytes | None = None) -> Result:
    proc, reader = start(runner, argv, pol, cwd=cwd, env=env, stdin=stdin)
    return finish(proc, reader)


def sh(runner: DockerRunner, script: str, pol: SandboxPolicy, **kwargs: Any) -> Result:
    return run(runner, ["/bin/bash", "-c", script], pol, **kwargs)


def container_of(runner: DockerRunner) -> str:
    """The id of the runner's only warm container."""
    ids = [warm.id for warm in runner._warm.values()]
    assert len(ids) == 1, ids
    return ids[0]
