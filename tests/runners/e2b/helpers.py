"""Shared helpers of the E2B runner tests: policies and running one command."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.runners.e2b import E2BRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Argv, ExitStatus, RemoteLaunch, RemoteProcess

WAIT_S = 180.0  # generous: 2 cores shared by several test runs


@dataclass(frozen=True)
class Ran:
    status: ExitStatus
    stdout: bytes
    stderr: bytes


def policy(mode: str, workspace: Path, **kw: Any) -> SandboxPolicy:
    protected = kw.pop("protected_paths", (workspace / ".git", workspace / ".dsh"))
    return SandboxPolicy(mode=SandboxMode(mode), workspace=workspace,
                         protected_paths=tuple(protected), **kw)


def start(runner: E2BRunner, argv: Argv, pol: SandboxPolicy, *, stdin: bytes | None = None,
          cwd: Path | None = None, env: dict[str, str] | None = None,
          deadline_s: float = WAIT_S) -> tuple[RemoteProcess, _Collector]:
    launch = runner.prepare(argv, pol, cwd=str(cwd or pol.workspace), env=env or {})
    assert isinstance(launch, RemoteLaunch)
    proc = launch.start(stdin, time.monotonic() + deadline_s)
    return proc, _Collector(proc)


def run(runner: E2BRunner, argv: Argv, pol: SandboxPolicy, **kw: Any) -> Ran:
    proc, out = start(runner, argv, pol, **kw)
    status = proc.wait(WAIT_S)
    assert status is not None, f"{argv!r} did not finish in {WAIT_S}s"
    return out.result(status)


class _Collector:
    """Reads both pipes in threads (a full pipe would stall the pump)."""

    def __init__(self, proc: RemoteProcess) -> None:
        self.chunks: dict[int, bytearray] = {proc.stdout_fd: bytearray(), proc.stderr_fd: bytearray()}
        self.proc = proc
        self.threads = [threading.Thread(target=self._read, args=(fd,), daemon=True)
                        for fd in self.chunks]
        for t in self.threads:
            t.start()

    def _read(self, fd: int) -> None:
        while chunk := os.read(fd, 1 << 16):
            self.chunks[fd] += chunk
        os.close(fd)

    def stdout_so_far(self) -> bytes:
        return bytes(self.chunks[self.proc.stdout_fd])

    def result(self, status: ExitStatus) -> Ran:
        for t in self.threads:
            t.join(WAIT_S)
        return Ran(status, bytes(self.chunks[self.proc.stdout_fd]),
                   bytes(self.chunks[self.proc.stderr_fd]))


def wait_for(predicate: Any, what: str, timeout: float = WAIT_S) -> None:
    """Poll a condition up to a generous deadline (a bound, not a timing bet)."""
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def sandbox_path(root: Path, path: Path) -> Path:
    """Where the envd double keeps a sandbox path."""
    return root / str(path).lstrip("/")
