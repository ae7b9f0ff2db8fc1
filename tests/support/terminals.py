"""A session with terminals mounted, on a real runner."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsh.sandbox.context import build_context

from tests.support.sandboxed import accept_for, need_runner

#: Runners a terminal session is tested on for real here.
TERMINAL_RUNNERS = ("landlock", "bwrap", "docker")


@contextmanager
def terminal_ctx(workspace: Path, runner: str, *, mode: str = "workspace-write",
                 extra: tuple[dict[str, Any], ...] = (), profile: str | None = None) -> Iterator[Any]:
    need_runner(runner)
    policy: dict[str, Any] = {"mode": mode, "workspace": str(workspace), "accept_degraded": list(accept_for(runner))}
    if profile is not None:
        policy["profile"] = profile
    ctx = build_context([
        {"id": "policy", "name": "sandbox-policy", "config": policy},
        {"id": "sandbox", "name": "sandbox", "config": {"runner": runner}},
        {"id": "shell", "name": "bash-sandbox", "config": {"cwd": str(workspace)}},
        {"id": "terminals", "name": "terminals", "config": {}},
        {"id": "terminal-bash", "name": "terminal-bash", "config": {}},
        *extra,
    ])
    try:
        yield ctx
    finally:
        ctx.close()
