"""Shared helpers of the bwrap runner tests: a real runner, policies, a spawn helper.

Launches are spawned directly with ``subprocess.Popen(launch.argv, pass_fds=...)``
(the executor integration is tested elsewhere); every run has a generous
timeout and always runs the launch's ``cleanup``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import LocalLaunch

from tests.support.require import require_runner
from tests.support.runners import Completed
from tests.support.wait import PATIENCE_S

_RUNNER: BwrapRunner | None = None


@pytest.fixture
def runner() -> BwrapRunner:
    """One probed runner for the whole session (the probe is cached on it)."""
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = BwrapRunner()
    require_runner("bwrap", _RUNNER)
    return _RUNNER


@dataclass(frozen=True)
class Layout:
    """A workspace with a git dir, plus a sibling directory outside every root."""

    root: Path
    ws: Path
    outside: Path


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    root = tmp_path.resolve()
    ws = root / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("original\n")
    outside = root / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    yield Layout(root, ws, outside)


def policy(
    ws: Path,
    mode: SandboxMode = SandboxMode.WORKSPACE_WRITE,
    *,
    roots: Sequence[Path] | None = None,
    protected: Sequence[str] = (".git", ".dsh"),
    read_only: Sequence[Path] = (),
    hidden: Sequence[Path] = (),
    network: bool = False,
    limits: ResourceLimits | None = None,
    accept: Sequence[str] = (),
) -> SandboxPolicy:
    """A policy as the policy service builds it (lexical + canonical protected paths)."""
    writable = tuple(roots if roots is not None else (ws,))
    if mode is not SandboxMode.WORKSPACE_WRITE:
        writable = ()
    prot: set[Path] = set()
    for r in writable:
        for name in protected:
            prot |= {r / name, Path(os.path.realpath(r / name))}
    return SandboxPolicy(
        mode=mode,
        workspace=ws,
        writable_roots=writable,
        protected_paths=tuple(sorted(prot)),
        read_only_paths=tuple(read_only),
        hidden_paths=tuple(hidden),
        network=network,
        limits=limits or ResourceLimits(),
        accept_degraded=tuple(accept),
    )


def spawn(launch: LocalLaunch, **kw: object) -> subprocess.Popen[bytes]:
    """Spawn as the subprocess service does: the helpers with the launch's own
    environment, through ``spawn_in`` (which lets the command start)."""

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            launch.argv,
            pass_fds=launch.pass_fds,
            env=launch.spawn_env,
            start_new_session=True,
            **kw,  # type: ignore[call-overload]
        )

    proc: subprocess.Popen[bytes] = launch.spawn_in(start) if launch.spawn_in is not None else start()
    return proc


def kill_launch(launch: LocalLaunch, proc: subprocess.Popen[bytes]) -> None:
    if launch.kill_tree is not None:
        launch.kill_tree(proc.pid, signal.SIGKILL)
    else:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(
    runner: BwrapRunner,
    argv: Sequence[str | bytes],
    pol: SandboxPolicy,
    *,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    timeout: float = PATIENCE_S,
) -> Completed:
    launch = runner.prepare(argv, pol, cwd=str(cwd or pol.workspace), env=dict(os.environ))
    assert isinstance(launch, LocalLaunch)
    try:
        proc = spawn(
            launch,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_launch(launch, proc)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"killing the sandbox left processes holding its output: {argv!r}")
            pytest.fail(f"sandboxed command did not finish within {timeout} s: {argv!r}")
        return Completed.from_returncode(proc.returncode, out, err)
    finally:
        if launch.cleanup is not None:
            launch.cleanup()


def sh(runner: BwrapRunner, script: str, pol: SandboxPolicy, **kw: object) -> Completed:
    return run(runner, ["/bin/sh", "-c", script], pol, **kw)  # type: ignore[arg-type]


BOTH_MODES = pytest.mark.parametrize(
    "mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY], ids=["ws-write", "read-only"]
)
