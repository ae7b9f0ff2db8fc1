"""Shared helpers for the Landlock runner tests: policies and a direct spawn.

Commands are spawned with ``subprocess.Popen`` inside ``launch.spawn_in`` (the
way the subprocess service will), never through an executor.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.rules import DEGRADE_METADATA
from dsh.runners.landlock.runner import PROCESS_LIST_GAP
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import LocalLaunch

from tests.support.require import require_runner
from tests.support.runners import Completed
from tests.support.wait import PATIENCE_S

PY = sys.executable
RO = SandboxMode.READ_ONLY
WW = SandboxMode.WORKSPACE_WRITE


def make_policy(
    mode: SandboxMode,
    workspace: Path,
    *,
    extra_roots: Sequence[Path] = (),
    network: bool = False,
    limits: ResourceLimits | None = None,
    **fields: object,
) -> SandboxPolicy:
    roots = (workspace, *extra_roots) if mode is WW else ()
    # Every test accepts that the host's process list stays visible (no pid
    # namespace); the tests of that gap itself build their policy directly.
    accepted = tuple(fields.pop("accept_degraded", ()))  # type: ignore[arg-type]
    fields["accept_degraded"] = (*accepted, PROCESS_LIST_GAP.degradation)
    if mode is WW:
        # Every workspace-write test accepts the metadata gap (chmod/chown outside
        # the roots); the tests of that gap itself build their policy directly.
        fields["accept_degraded"] = (*fields["accept_degraded"], DEGRADE_METADATA)  # type: ignore[misc]
    return SandboxPolicy(
        mode=mode,
        workspace=workspace,
        writable_roots=roots,
        network=network,
        limits=limits or ResourceLimits(),
        **fields,  # type: ignore[arg-type]
    )


def start(
    runner: LandlockRunner,
    policy: SandboxPolicy,
    argv: Sequence[str | bytes],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
) -> tuple[subprocess.Popen[bytes], LocalLaunch]:
    """Spawn ``argv`` in the sandbox and return at once (the caller reaps it and runs ``cleanup``)."""
    workdir = str(cwd or policy.workspace)
    command_env = {**os.environ, **(env or {})}
    launch = runner.prepare(argv, policy, cwd=workdir, env=command_env)
    full_env = dict(launch.spawn_env) if launch.spawn_env is not None else {**command_env, **launch.env}
    assert launch.spawn_in is not None or not policy.constrained

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(launch.argv),
            cwd=workdir,
            env=full_env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=launch.pass_fds,
        )

    return (launch.spawn_in(spawn) if launch.spawn_in else spawn()), launch


def finish(proc: subprocess.Popen[bytes], launch: LocalLaunch, timeout: float = PATIENCE_S) -> Completed:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if launch.kill_tree is not None:
            launch.kill_tree(proc.pid, 9)
        proc.kill()
        proc.communicate()
        raise
    finally:
        if launch.cleanup is not None:
            launch.cleanup()
    return Completed.from_returncode(proc.returncode, out, err)


def run(
    runner: LandlockRunner,
    policy: SandboxPolicy,
    argv: Sequence[str | bytes],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = subprocess.DEVNULL,
    timeout: float = PATIENCE_S,
) -> Completed:
    proc, launch = start(runner, policy, argv, cwd=cwd, env=env, stdin=stdin)
    return finish(proc, launch, timeout)


def py(runner: LandlockRunner, policy: SandboxPolicy, code: str, *args: str, **kw: object) -> Completed:
    """Run ``python -c code args...`` in the sandbox."""
    return run(runner, policy, [PY, "-c", code, *args], **kw)  # type: ignore[arg-type]


def sh(runner: LandlockRunner, policy: SandboxPolicy, script: str, **kw: object) -> Completed:
    return run(runner, policy, ["bash", "-c", script], **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def runner() -> Iterator[LandlockRunner]:
    instance = LandlockRunner()
    require_runner("landlock", instance)
    yield instance
    instance.close()


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, outside): two sibling directories; ``outside`` is never writable."""
    ws = (tmp_path / "ws").resolve()
    outside = (tmp_path / "outside").resolve()
    ws.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("original\n")
    (ws / "file.txt").write_text("in workspace\n")
    return ws, outside
