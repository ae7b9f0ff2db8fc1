"""Shared helpers of the foundation tests: contexts and /proc inspection."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dsh.executors.seam import ShellExecRequest, ShellExecution, ShellExecutor, ShellRunResult
from dsh.sandbox.context import Context, build_context

from tests.support.wait import PATIENCE_S, wait_until


def make_context(cwd: Path, name: str = "bash-local", **config: Any) -> Context:
    return build_context([{"id": "shell", "name": name, "config": {"cwd": str(cwd), **config}}])


def run(ctx: Context, command: str, **request: Any) -> ShellRunResult:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=command, **request))
    result: ShellRunResult = ctx.require(ShellExecutor).execute(spec).result(timeout=PATIENCE_S)
    return result


def start(ctx: Context, command: str, **request: Any) -> ShellExecution:
    request.setdefault("on_expiry", "none")
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=command, **request))
    execution: ShellExecution = ctx.require(ShellExecutor).execute(spec)
    return execution


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def group_members(pgid: int, *, include_zombies: bool = True) -> list[tuple[int, str]]:
    """Every process whose process group is ``pgid``, with its state."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is None or stat[2] != pgid:
            continue
        if stat[0] == "Z" and not include_zombies:
            continue
        out.append((int(entry), stat[0]))
    return out


def wait_group_gone(pgid: int, *, include_zombies: bool = True) -> None:
    """Wait until the process group is empty; fail naming what is left."""
    wait_until(
        lambda: not group_members(pgid, include_zombies=include_zombies),
        lambda: f"process group {pgid} to be empty: {group_members(pgid, include_zombies=include_zombies)}",
    )


def first_line_int(execution: ShellExecution) -> int:
    """Wait for the command to print a number on its first stdout line."""
    holder: list[int] = []

    def ready() -> bool:
        data, _ = execution.observed.read("stdout", 0)
        if b"\n" not in data:
            return False
        holder.append(int(data.split(b"\n", 1)[0]))
        return True

    wait_until(ready, "the command to print its pid")
    return holder[0]
