"""A terminal session and a persistent bash on the e2b runner, through the envd double."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.terminal_registry import TerminalRegistry
from dsh.executors.terminal_seam import TerminalOpenRequest, TerminalSendRequest
from dsh.sandbox.context import build_context
from dsh.tools.toolbox import call_tool

from tests.runners.e2b.conftest import Envd

SETTLE = {"settle_ms": 60_000, "idle_ms": 3_000}


@pytest.fixture
def ctx(envd: Envd, workspace: Path) -> Iterator[Any]:
    context = build_context([
        {"id": "policy", "name": "sandbox-policy",
         "config": {"mode": "workspace-write", "workspace": str(workspace), "accept_degraded": ["e2b-debug"]}},
        {"id": "sandbox", "name": "sandbox",
         "config": {"runner": "e2b", "options": {"e2b": {"sandbox_url": envd.url, "setup_timeout": 120}}}},
        {"id": "shell", "name": "bash-sandbox", "config": {"cwd": str(workspace)}},
        {"id": "terminals", "name": "terminals", "config": {}},
        {"id": "terminal-bash", "name": "terminal-bash", "config": {}},
        {"id": "persistent-shells", "name": "persistent-shells", "config": {}},
    ])
    try:
        yield context
    finally:
        context.close()


def test_python_interactive_interrupted_and_closed(ctx: Any) -> None:
    reg = ctx.require(TerminalRegistry)
    entry = reg.open("me", TerminalOpenRequest())
    assert entry.session.initial.wait_reason == "stdin_read"
    snap = reg.send(entry.id, "me", TerminalSendRequest("python3 -q"), **SETTLE)
    assert snap.text.endswith(">>>"), snap.text
    snap = reg.send(entry.id, "me", TerminalSendRequest("import time; time.sleep(1000)"), **SETTLE)
    assert snap.wait_reason == "inferred_idle", snap
    snap = reg.send(entry.id, "me", TerminalSendRequest("", submit=False, signal="SIGINT"), **SETTLE)
    assert "KeyboardInterrupt" in snap.text and snap.wait_reason == "stdin_read", snap.text
    assert reg.close_session(entry.id, "me") is True


def test_persistent_bash_keeps_cd_and_export(ctx: Any) -> None:
    call_tool(ctx, "bash", {"command": "cd /tmp && export KEPT=yes", "description": "d"}, owner="a")
    got = call_tool(ctx, "bash", {"command": 'echo "$KEPT $PWD"', "description": "d"}, owner="a")
    assert got.content.rstrip("\n") == "yes /tmp", got.content
