"""Helpers of the tool tests: contexts with the tools' services, and /proc checks."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsh.executors.render import ExitStatusMarker, parse_exit_status
from dsh.sandbox.context import Context, build_context
from dsh.tools.base import ToolResult
from dsh.tools.toolbox import call_tool

#: Generous bounds: 2 cores shared by many test runs.
PATIENCE_S = 60.0


@contextmanager
def local_ctx(
    workspace: Path,
    *,
    jobs: Mapping[str, Any] | None = None,
    with_jobs: bool = True,
    executor: str = "bash-local",
    extra: Sequence[Mapping[str, Any]] = (),
) -> Iterator[Context]:
    entries: list[Mapping[str, Any]] = [
        {"id": "shell", "name": executor, "config": {"cwd": str(workspace)}}
    ]
    if with_jobs:
        entries.append({"id": "jobs", "name": "jobs", "config": dict(jobs or {})})
    entries.extend(extra)
    ctx = build_context(entries)
    try:
        yield ctx
    finally:
        ctx.close()


@contextmanager
def sandboxed_ctx(
    workspace: Path,
    *,
    runner: str,
    mode: str,
    approval: Mapping[str, Any] | None = None,
    accept_degraded: Sequence[str] = (),
) -> Iterator[Context]:
    entries: list[Mapping[str, Any]] = [
        {
            "id": "policy",
            "name": "sandbox-policy",
            "config": {
                "mode": mode,
                "workspace": str(workspace),
                "accept_degraded": list(accept_degraded),
            },
        },
        {"id": "sandbox", "name": "sandbox", "config": {"runner": runner}},
        {"id": "shell", "name": "bash-sandbox", "config": {"cwd": str(workspace)}},
        {"id": "jobs", "name": "jobs"},
    ]
    if approval is not None:
        entries.append({"id": "approval", **approval})
    ctx = build_context(entries)
    try:
        yield ctx
    finally:
        ctx.close()


def call(ctx: Context, name: str, args: Any, owner: str = "agent-a") -> ToolResult:
    return call_tool(ctx, name, args, owner=owner)


def bash(ctx: Context, command: str, owner: str = "agent-a", **args: Any) -> ToolResult:
    return call(ctx, "bash", {"command": command, "description": "test", **args}, owner)


def parsed(result: ToolResult) -> ExitStatusMarker:
    return parse_exit_status(result.content)


def marker() -> str:
    """A unique number to put in a command line (``sleep 1000.<marker>``)."""
    return str(uuid.uuid4().int % 10**12)


def pids_with(mark: str) -> list[int]:
    """Live processes whose command line contains ``mark`` (zombies have none)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if mark.encode() in cmdline:
            found.append(int(entry))
    return found


def wait_until(predicate: Any, timeout: float = PATIENCE_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.05)


def describe(pids: list[int]) -> str:
    """What is left, for a failure message: pid, state, parent, pgid, cmdline."""
    parts = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state = next((x for x in status.splitlines() if x.startswith("State:")), "")
        parts.append(f"pid {pid} {state} ppid {stat[1]} pgid {stat[2]}: {cmd}")
    return "; ".join(parts) or "(gone meanwhile)"


def assert_gone(mark: str, timeout: float = PATIENCE_S) -> None:
    """Every process whose command line has ``mark`` is gone (bounded wait)."""
    deadline = time.monotonic() + timeout
    while pids_with(mark):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes left after {timeout}s: {describe(pids_with(mark))}")
        time.sleep(0.05)
