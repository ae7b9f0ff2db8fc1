"""Helpers of the tool tests: contexts with the tools' services, and /proc checks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsh.sandbox.context import Context, build_context
from dsh.tools.base import ToolResult
from dsh.tools.render import ExitStatusMarker, parse_exit_status
from dsh.tools.toolbox import call_tool

from tests.support.processes import describe, pids_with
from tests.support.sandboxed import LANDLOCK_PROCESS_LIST
from tests.support.wait import wait_until


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
    profile: str | None = None,
) -> Iterator[Context]:
    if runner == "landlock" and LANDLOCK_PROCESS_LIST not in accept_degraded:
        # Every Landlock policy has this gap; only its own tests leave it refused.
        accept_degraded = (*accept_degraded, LANDLOCK_PROCESS_LIST)
    policy: dict[str, Any] = {"mode": mode, "workspace": str(workspace), "accept_degraded": list(accept_degraded)}
    if profile is not None:
        policy["profile"] = profile
    entries: list[Mapping[str, Any]] = [
        {"id": "policy", "name": "sandbox-policy", "config": policy},
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




def assert_gone(mark: str) -> None:
    """Every process whose command line has ``mark`` is gone (bounded wait)."""
    wait_until(lambda: not pids_with(mark), lambda: f"every process of {mark} to end: {describe(pids_with(mark))}")
