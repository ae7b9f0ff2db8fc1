"""Shared helpers of the foundation tests: contexts and /proc inspection."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsh.executors.seam import ShellExecRequest, ShellExecution, ShellRunResult
from dsh.sandbox.context import Context, build_context

#: Generous: 8 helpers share 2 cores while these tests run.
PATIENCE_S = 60.0


def make_context(cwd: Path, name: str = "bash-local", **config: Any) -> Context:
    return build_context([{"id": "shell", "name": name, "config": {"cwd": str(cwd), **config}}])


def run(ctx: Context, command: str, **request: Any) -> ShellRunResult:
    spec = ctx.shell.resolve(ShellExecRequest(command=command, **request))
    result: ShellRunResult = ctx.shell.execute(spec).result(timeout=PATIENCE_S)
    return result


def start(ctx: Context, command: str, **request: Any) -> ShellExecution:
    request.setdefault("on_expiry", "none")
    spec = ctx.shell.resolve(ShellExecRequest(command=command, **request))
    execution: ShellExecution = ctx.shell.execute(spec)
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


def wait_until(predicate: Callable[[], bool], timeout: float = PATIENCE_S) -> bool:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def wait_group_gone(pgid: int, *, include_zombies: bool = True) -> list[tuple[int, str]]:
    """Wait until the group is empty; return what is left (empty on success)."""
    wait_until(lambda: not group_members(pgid, include_zombies=include_zombies))
    return group_members(pgid, include_zombies=include_zombies)


def first_line_int(execution: ShellExecution) -> int:
    """Wait for the command to print a number on its first stdout line."""
    holder: list[int] = []

    def ready() -> bool:
        data, _ = execution.observed.read("stdout", 0)
        if b"\n" not in data:
            return False
        holder.append(int(data.split(b"\n", 1)[0]))
        return True

    assert wait_until(ready), "the command never printed its pid"
    return holder[0]
