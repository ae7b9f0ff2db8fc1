"""Drive the docker runner's ``RemoteProcess`` directly, like the subprocess service."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsh.runners.docker import DockerRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import RemoteLaunch, RemoteProcess

from tests.support.require import require_runner
from tests.support.runners import Completed, RemoteReader

ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


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


def start(runner: DockerRunner, argv: Sequence[str | bytes], pol: SandboxPolicy, *,
          cwd: Path | str | None = None, env: Mapping[str, str] = ENV,
          stdin: bytes | None = None) -> tuple[RemoteProcess, RemoteReader]:
    launch = runner.prepare(argv, pol, cwd=str(cwd or pol.workspace), env=env)
    assert isinstance(launch, RemoteLaunch)
    proc = launch.start(stdin, None)
    return proc, RemoteReader(proc)


def run(runner: DockerRunner, argv: Sequence[str | bytes], pol: SandboxPolicy, *,
        cwd: Path | str | None = None, env: Mapping[str, str] = ENV,
        stdin: bytes | None = None) -> Completed:
    _, reader = start(runner, argv, pol, cwd=cwd, env=env, stdin=stdin)
    return reader.finish()


def sh(runner: DockerRunner, script: str, pol: SandboxPolicy, **kwargs: Any) -> Completed:
    return run(runner, ["/bin/bash", "-c", script], pol, **kwargs)


def container_of(runner: DockerRunner) -> str:
    """The id of the runner's only warm container."""
    ids = [warm.id for warm in runner._warm.values()]
    assert len(ids) == 1, ids
    return ids[0]
