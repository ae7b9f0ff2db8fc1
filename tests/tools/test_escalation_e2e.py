"""Escalation end to end through the real Landlock and bwrap runners.

A write is denied in the session's mode; the model asks for the same command
under a more permissive mode; the approver decides; only on approval does the
same command run, once, and the file exist.
"""

from __future__ import annotations

import io
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.approval import Approval, EscalationDecision, EscalationRequest, PromptApproval, PromptConfig
from dsh.sandbox.context import Context

from tests.support.sandboxed import LINUX_RUNNERS, accept_for, need_runner
from tests.support.tools import bash, parsed, sandboxed_ctx

JUSTIFY = "the task is to write this report file"


@pytest.fixture(params=LINUX_RUNNERS)
def runner(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    need_runner(name)
    return name


@pytest.fixture(autouse=True)
def dsh_home(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = trusted_dir / "dsh-home"
    monkeypatch.setenv("DSH_HOME", str(home))
    return home


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside every writable root (not under /tmp); removed after."""
    path = Path("/var/tmp") / f"dsh-h7-{uuid.uuid4().hex}"
    path.mkdir()
    yield path
    shutil.rmtree(path)


def rules_entry(tmp_path: Path, text: str) -> dict[str, object]:
    path = tmp_path / "approvals.toml"
    # Every rule names where it applies: these tests run in tmp_path/ws.
    path.write_text(text.replace("[[rule]]\n", f'[[rule]]\nworkdir = "{tmp_path}/**"\n'))
    return {"name": "approval-rules", "config": {"path": str(path)}}


def ctx_for(workspace: Path, runner: str, mode: str, approval: dict[str, object] | None = None,  # type: ignore[no-untyped-def]
            profile: str | None = None):
    return sandboxed_ctx(workspace, runner=runner, mode=mode, approval=approval,
                         accept_degraded=accept_for(runner), profile=profile)


def test_denied_then_escalated_and_approved(workspace: Path, runner: str, tmp_path: Path) -> None:
    command = "echo report >> out.txt"
    approval = rules_entry(
        tmp_path, f'[[rule]]\nmode = "workspace-write"\ncommand = "{command}"\n'
    )
    with ctx_for(workspace, runner, "read-only", approval) as ctx:
        denied = bash(ctx, command)
        p = parsed(denied)
        assert not denied.is_error and p.exit_code != 0
        assert p.denied_mode == "read-only"
        assert not (workspace / "out.txt").exists()
        escalated = bash(ctx, command, sandbox_permissions="workspace-write", justification=JUSTIFY)
        assert not escalated.is_error, escalated.content
        assert parsed(escalated).exit_code == 0
        assert "[sandbox: ran under workspace-write mode after approval (once)]" in escalated.content
        assert (workspace / "out.txt").read_text() == "report\n"  # ran exactly once
        # The session mode is unchanged: the next plain call is denied again.
        again = bash(ctx, command)
        assert parsed(again).denied_mode == "read-only"
        assert (workspace / "out.txt").read_text() == "report\n"


def test_escalation_to_full_access_writes_outside(
    workspace: Path, runner: str, tmp_path: Path, outside: Path
) -> None:
    target = outside / "x.txt"
    command = f"echo hi > {target}"
    approval = rules_entry(
        tmp_path, f'[[rule]]\nmode = "danger-full-access"\ncommand = "{command}"\n'
    )
    # The repeated command is a re-run of the denied one, so the rules file
    # approves it only when that run changed nothing under the writable roots:
    # the shared /tmp, where other programs come and go, is left out of them.
    profile = outside / "quiet.toml"
    profile.write_text('extends = "workspace-write"\nexclude_tmp = true\n')
    with ctx_for(workspace, runner, "workspace-write", approval, profile=str(profile)) as ctx:
        assert parsed(bash(ctx, command)).denied_mode == "workspace-write"
        assert not target.exists()
        result = bash(ctx, command, sandbox_permissions="danger-full-access", justification=JUSTIFY)
        assert not result.is_error and parsed(result).exit_code == 0, result.content
    assert target.read_text() == "hi\n"


def test_approver_denial_runs_nothing(workspace: Path, runner: str, tmp_path: Path) -> None:
    command = "echo report > out.txt"
    for approval in (None, {"name": "approval-deny"},
                     rules_entry(tmp_path, '[[rule]]\nmode = "workspace-write"\ncommand = "other"\n')):
        with ctx_for(workspace, runner, "read-only", approval) as ctx:
            result = bash(ctx, command, sandbox_permissions="workspace-write", justification=JUSTIFY)
            assert result.is_error
            assert result.content.startswith("Escalation rejected:")
            assert "denied by approval-" in result.content and "Nothing was run." in result.content
        assert not (workspace / "out.txt").exists()


def test_rules_approve_one_exact_command_and_deny_its_neighbour(
    workspace: Path, runner: str, tmp_path: Path
) -> None:
    approval = rules_entry(
        tmp_path, '[[rule]]\nmode = "workspace-write"\ncommand = "echo a > a.txt"\n'
    )
    with ctx_for(workspace, runner, "read-only", approval) as ctx:
        neighbour = bash(ctx, "echo a > a.txt; echo b > b.txt",
                         sandbox_permissions="workspace-write", justification=JUSTIFY)
        assert neighbour.is_error and "no rule approves" in neighbour.content
        assert not (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()
        approved = bash(ctx, "echo a > a.txt", sandbox_permissions="workspace-write",
                        justification=JUSTIFY)
        assert not approved.is_error, approved.content
    assert (workspace / "a.txt").read_text() == "a\n"
    assert not (workspace / "b.txt").exists()


class Counting(Approval):
    """A test provider of the approval seam: approves with a fixed scope, counts questions."""

    def __init__(self, ctx: Context, outcome: str) -> None:
        super().__init__(ctx)
        self.outcome = outcome
        self.asked: list[str] = []

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        self.asked.append(request.command)
        if self.outcome == "approve_session":
            return EscalationDecision.approve_session("test")
        return EscalationDecision.approve_once("test")


def test_once_asks_every_time_and_session_only_for_the_same_command(
    workspace: Path, runner: str
) -> None:
    for outcome in ("approve_once", "approve_session"):
        with ctx_for(workspace, runner, "read-only") as ctx:
            approver = Counting(ctx, outcome)
            ctx.provide(approver)
            for _ in range(2):
                result = bash(ctx, "echo x >> n.txt", sandbox_permissions="workspace-write",
                              justification=JUSTIFY)
                assert not result.is_error, result.content
            other = bash(ctx, "echo y >> m.txt", sandbox_permissions="workspace-write",
                         justification=JUSTIFY)
            assert not other.is_error
        asked = approver.asked
        if outcome == "approve_once":
            assert asked == ["echo x >> n.txt", "echo x >> n.txt", "echo y >> m.txt"]
        else:
            assert asked == ["echo x >> n.txt", "echo y >> m.txt"]
        assert (workspace / "n.txt").read_text() == "x\nx\n"
        (workspace / "n.txt").unlink()
        (workspace / "m.txt").unlink()


def test_prompt_session_approval_never_widens(workspace: Path, runner: str) -> None:
    out = io.StringIO()
    with ctx_for(workspace, runner, "read-only") as ctx:
        ctx.provide(PromptApproval(ctx, PromptConfig(timeout_s=30), input=io.StringIO("s\n"),
                                   output=out))
        first = bash(ctx, "echo 1 >> a.txt", sandbox_permissions="workspace-write",
                     justification=JUSTIFY)
        assert not first.is_error, first.content
        assert "(session)" in first.content
        second = bash(ctx, "echo 1 >> a.txt", sandbox_permissions="workspace-write",
                      justification=JUSTIFY)
        assert not second.is_error  # remembered: nobody was asked (the input is used up)
        wider = bash(ctx, "echo 1 >> a.txt; touch b.txt", sandbox_permissions="workspace-write",
                     justification=JUSTIFY)
        assert wider.is_error and "denied" in wider.content
    assert out.getvalue().count("escalation requested") == 2
    assert (workspace / "a.txt").read_text() == "1\n1\n"
    assert not (workspace / "b.txt").exists()


@pytest.mark.parametrize(
    ("session", "args", "message"),
    [
        ("read-only", {"sandbox_permissions": "read-only", "justification": JUSTIFY},
         "not more permissive than the current 'read-only' mode"),
        ("workspace-write", {"sandbox_permissions": "read-only", "justification": JUSTIFY},
         "not more permissive than the current 'workspace-write' mode"),
        ("read-only", {"sandbox_permissions": "workspace-write"}, "a justification is required"),
        ("read-only", {"sandbox_permissions": "workspace-write", "justification": "  "},
         "a justification is required"),
        ("read-only", {"sandbox_permissions": "root", "justification": JUSTIFY},
         "sandbox_permissions: must be one of"),
        ("read-only", {"sandbox_permissions": 2, "justification": JUSTIFY},
         "sandbox_permissions: must be a string"),
        ("read-only", {"justification": JUSTIFY}, "justification was given without"),
    ],
)
def test_bad_escalations_are_rejected_before_anyone_is_asked(
    workspace: Path, runner: str, session: str, args: dict[str, object], message: str
) -> None:
    with ctx_for(workspace, runner, session) as ctx:
        approver = Counting(ctx, "approve_once")
        ctx.provide(approver)
        result = bash(ctx, "touch ran", **args)
        assert result.is_error and message in result.content, result.content
        assert "Nothing was run." in result.content
        assert approver.asked == []
    assert not (workspace / "ran").exists()
