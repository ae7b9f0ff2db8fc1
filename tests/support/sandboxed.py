"""Shared helpers of the sandboxed-executor and CLI tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsh.sandbox.context import Context, build_context
from dsh.sandbox.host import SandboxHost, SandboxHostConfig

from tests.support.require import require_runner, unavailable

#: The Linux runners these tests run for real.
LINUX_RUNNERS = ("landlock", "bwrap")
#: Landlock cannot keep protected paths read-only inside a writable root, nor
#: hide the host's process list; the tests accept those degradations by name
#: (as a profile would).
LANDLOCK_PROCESS_LIST = "landlock-process-list"
LANDLOCK_DEGRADED = ("landlock-protected-paths", "landlock-metadata", LANDLOCK_PROCESS_LIST)


def need_runner(name: str) -> None:
    """Skip (or fail, when CI requires the runner) unless ``name`` works here."""
    with Context() as ctx:
        host = SandboxHost(ctx, SandboxHostConfig())
        runner = host.runner(name)
        if runner is None:
            unavailable(name, host.probe(name).reason or "the probe failed")
        require_runner(name, runner)


def accept_for(runner: str) -> tuple[str, ...]:
    return LANDLOCK_DEGRADED if runner == "landlock" else ()


@contextmanager
def sandbox_ctx(
    workspace: Path,
    *,
    runner: str = "auto",
    mode: str = "workspace-write",
    executor: str = "bash-sandbox",
    accept_degraded: Sequence[str] = (),
    profile: str | None = None,
    writable: Sequence[str] = (),
    options: dict[str, Any] | None = None,
) -> Iterator[Any]:
    """A composition built through entry points, as a user's would be.

    On landlock the visible host process list is accepted: every Landlock
    policy has that gap, and only its own tests leave it refused."""
    if runner == "landlock" and LANDLOCK_PROCESS_LIST not in accept_degraded:
        accept_degraded = (*accept_degraded, LANDLOCK_PROCESS_LIST)
    policy: dict[str, Any] = {
        "mode": mode,
        "workspace": str(workspace),
        "accept_degraded": list(accept_degraded),
        "writable": list(writable),
    }
    if profile is not None:
        policy["profile"] = profile
    ctx = build_context(
        [
            {"id": "policy", "name": "sandbox-policy", "config": policy},
            {
                "id": "sandbox",
                "name": "sandbox",
                "config": {"runner": runner, "options": {runner: options or {}}},
            },
            {"id": "shell", "name": executor, "config": {"cwd": str(workspace)}},
        ]
    )
    try:
        yield ctx
    finally:
        ctx.close()
