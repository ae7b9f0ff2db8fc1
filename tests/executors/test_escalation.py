"""One escalation flow: the shell tools and ``run --approval`` both go through
``dsh.executors.escalation``, and the approval seam is its only decision point."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.cli.run import RunOptions, run_command
from dsh.executors import escalation
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.session import SessionSpec, build_session
from dsh.tools.toolbox import call_tool

from tests.support.sandboxed import need_runner

COMMAND = "echo a >> a.txt"


@pytest.fixture(autouse=True)
def dsh_home(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the escalation log of each test goes."""
    monkeypatch.setenv("DSH_HOME", str(trusted_dir / "dsh-home"))
    return trusted_dir / "dsh-home"


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Every question the shared flow put to the approval seam, and its answer."""
    calls: list[dict[str, Any]] = []
    real = escalation.ask

    def spy(*args: Any, **kwargs: Any) -> escalation.Grant:
        grant = real(*args, **kwargs)
        calls.append({**kwargs, "approved": grant.approved})
        return grant

    monkeypatch.setattr(escalation, "ask", spy)
    yield calls


def approving_rules(trusted_dir: Path, workspace: Path) -> str:
    path = trusted_dir / "approvals.toml"
    path.write_text(f'[[rule]]\nmode = "workspace-write"\nworkdir = "{workspace}"\ncommand = "{COMMAND}"\n')
    return f"rules:{path}"


def records(home: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (home / "escalations.jsonl").read_text().splitlines()]


def test_the_bash_tool_escalates_through_the_shared_flow(
    workspace: Path, trusted_dir: Path, dsh_home: Path, asked: list[dict[str, Any]]
) -> None:
    need_runner("bwrap")
    spec = SessionSpec(mode="read-only", workspace=str(workspace), runner="bwrap", executor="bash-sandbox",
                       approval=approving_rules(trusted_dir, workspace))
    with build_session(spec) as ctx:
        result = call_tool(ctx, "bash", {
            "command": COMMAND, "description": "append", "sandbox_permissions": "workspace-write",
            "justification": "the task writes a.txt",
        }, owner="agent-1")
    assert not result.is_error, result.content
    assert (workspace / "a.txt").read_text() == "a\n"  # ran once, under the granted mode
    assert [(c["tool"], c["mode"], c["approved"]) for c in asked] == [
        ("bash", SandboxMode.WORKSPACE_WRITE, True)
    ]
    [record] = records(dsh_home)
    assert record["tool"] == "bash" and record["decision"] == "approve_once"


def test_run_approval_escalates_through_the_shared_flow(
    workspace: Path, trusted_dir: Path, dsh_home: Path, asked: list[dict[str, Any]]
) -> None:
    need_runner("bwrap")
    code = run_command(RunOptions(mode="read-only", workspace=str(workspace), runner="bwrap",
                                  approval=approving_rules(trusted_dir, workspace), command=COMMAND))
    assert code == 0
    assert (workspace / "a.txt").read_text() == "a\n"  # denied once, then re-run once
    assert [(c["tool"], c["mode"], c["approved"]) for c in asked] == [
        ("dsh-sandbox run", SandboxMode.WORKSPACE_WRITE, True)
    ]
    [record] = records(dsh_home)
    assert record["tool"] == "dsh-sandbox run" and record["decision"] == "approve_once"


def test_without_an_approval_provider_the_flow_denies(workspace: Path, dsh_home: Path) -> None:
    spec = SessionSpec(mode="read-only", workspace=str(workspace), executor="bash-sandbox")
    with build_session(spec) as ctx:
        shell = ctx.require(ShellExecutor)
        grant = escalation.ask(ctx, shell, mode=SandboxMode.DANGER_FULL_ACCESS, command="true",
                               workdir=str(workspace), justification="needed", tool="t", owner="o")
        assert not grant.approved and grant.decision.provider == "approval-deny"
        with pytest.raises(PermissionError):
            grant.resolve(shell, ShellExecRequest(command="true"))
    [record] = records(dsh_home)
    assert record["decision"] == "deny"
