"""Run one command through the gVisor runner as the executor would (start, read, wait, close)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.runners.gvisor import GvisorRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import ExitStatus, LocalLaunch, RemoteLaunch

from tests.support.wait import PATIENCE_S

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}


def policy(ws: Path, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE, *, hidden: Sequence[Path] = (),
           read_only: Sequence[Path] = (), limits: ResourceLimits | None = None,
           roots: Sequence[Path] | None = None, accept: Sequence[str] = (), network: bool = False) -> SandboxPolicy:
    writable = tuple(roots if roots is not None else (ws,)) if mode is SandboxMode.WORKSPACE_WRITE else ()
    return SandboxPolicy(mode=mode, workspace=ws, writable_roots=writable,
                         protected_paths=(ws / ".git", ws / ".dsh"), hidden_paths=tuple(hidden),
                         read_only_paths=tuple(read_only), limits=limits or ResourceLimits(),
                         accept_degraded=tuple(accept), network=network)


@dataclass
class Ran:
    status: ExitStatus
    out: bytes
    err: bytes

    @property
    def text(self) -> str:
        return (self.out + self.err).decode("utf-8", "replace")


def _drain(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb", closefd=True) as fh:
        into.append(fh.read())


def start(runner: GvisorRunner, argv: Sequence[str | bytes], pol: SandboxPolicy, *, stdin: bytes | None = None,
          cwd: Path | None = None):  # type: ignore[no-untyped-def]
    launch = runner.prepare(argv, pol, cwd=str(cwd or pol.workspace), env=ENV)
    assert isinstance(launch, RemoteLaunch)
    return launch.start(stdin, None)


def finish(proc) -> Ran:  # type: ignore[no-untyped-def]
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [threading.Thread(target=_drain, args=(proc.stdout_fd, out)),
               threading.Thread(target=_drain, args=(proc.stderr_fd, err))]
    for t in readers:
        t.start()
    status = proc.wait(PATIENCE_S)
    assert status is not None, "the command did not finish"
    for t in readers:
        t.join(PATIENCE_S)
    proc.close()
    return Ran(status, out[0], err[0])


def run(runner: GvisorRunner, argv: Sequence[str | bytes], pol: SandboxPolicy, **kw: object) -> Ran:
    launch_or_proc = start(runner, argv, pol, **kw)  # type: ignore[arg-type]
    return finish(launch_or_proc)


def sh(runner: GvisorRunner, script: str, pol: SandboxPolicy, **kw: object) -> Ran:
    return run(runner, ["/bin/sh", "-c", script], pol, **kw)


__all__ = ["ENV", "LocalLaunch", "Ran", "finish", "policy", "run", "sh", "start"]
