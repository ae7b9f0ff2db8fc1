"""Shared helpers of the E2B runner tests: policies and running one command."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dsh.runners.e2b import E2BRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Argv, RemoteLaunch, RemoteProcess

from tests.support.runners import Completed, RemoteReader
from tests.support.wait import PATIENCE_S


def policy(mode: str, workspace: Path, **kw: Any) -> SandboxPolicy:
    protected = kw.pop("protected_paths", (workspace / ".git", workspace / ".dsh"))
    # The tests drive the envd double in debug mode: the gate every runner's
    # prepare runs refuses it unless accepted by name, as a user would.
    kw.setdefault("accept_degraded", ("e2b-debug",))
    return SandboxPolicy(mode=SandboxMode(mode), workspace=workspace,
                         protected_paths=tuple(protected), **kw)


def start(runner: E2BRunner, argv: Argv, pol: SandboxPolicy, *, stdin: bytes | None = None,
          cwd: Path | None = None, env: dict[str, str] | None = None,
          deadline_s: float = PATIENCE_S) -> tuple[RemoteProcess, RemoteReader]:
    launch = runner.prepare(argv, pol, cwd=str(cwd or pol.workspace), env=env or {})
    assert isinstance(launch, RemoteLaunch)
    proc = launch.start(stdin, time.monotonic() + deadline_s)
    return proc, RemoteReader(proc)


def run(runner: E2BRunner, argv: Argv, pol: SandboxPolicy, **kw: Any) -> Completed:
    _, out = start(runner, argv, pol, **kw)
    return out.finish()


def sandbox_path(root: Path, path: Path) -> Path:
    """Where the envd double keeps a sandbox path."""
    return root / str(path).lstrip("/")
