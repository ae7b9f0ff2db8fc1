"""A re-run after a denial tells the approver what the denied run changed, and
a rules file never approves one whose inputs changed."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.executors import escalation
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.approval import Approval, EscalationDecision, EscalationRequest, PromptApproval, PromptConfig
from dsh.sandbox.approval_rules import RulesApproval, RulesConfig
from dsh.sandbox.context import Context
from dsh.sandbox.file_changes import FileChanges
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.session import SessionSpec, build_session

from tests.support.sandboxed import need_runner

FULL = SandboxMode.DANGER_FULL_ACCESS
WS = SandboxMode.WORKSPACE_WRITE
WORKDIR = "/work"
MAKEFILE = FileChanges(modified=(f"{WORKDIR}/Makefile",), created=("/tmp/x\x1b[2J",), total=2)


@pytest.fixture(autouse=True)
def dsh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh-home"))
    yield tmp_path / "dsh-home"


def req(changes: FileChanges | None, command: str = "make") -> EscalationRequest:
    return EscalationRequest(command, WORKDIR, WS, FULL, "denied", "dsh-sandbox run", "me", changes=changes)


def rules(tmp_path: Path, decision: str = "once", **config: object) -> RulesApproval:
    path = tmp_path / "rules.toml"
    path.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{WORKDIR}"\ncommand = "make"\n'
                    f'decision = "{decision}"\n')
    return RulesApproval(Context(), RulesConfig(path=str(path), **config))  # type: ignore[arg-type]


def records(home: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (home / "escalations.jsonl").read_text().splitlines()]


def test_a_rule_does_not_approve_a_rerun_whose_inputs_changed(tmp_path: Path, dsh_home: Path) -> None:
    approver = rules(tmp_path)
    assert approver.approve_escalation(req(None)).approved  # asked before any run
    assert approver.approve_escalation(req(FileChanges())).approved  # nothing changed, and that is known
    denied = approver.approve_escalation(req(MAKEFILE))
    assert not denied.approved
    assert "changed 2 file(s)" in denied.reason and "modified /work/Makefile" in denied.reason
    assert "\x1b" not in denied.reason  # a name the command chose is shown escaped
    unknown = approver.approve_escalation(req(FileChanges.unknown("/ws: more than 100000 entries")))
    assert not unknown.approved and "unknown (/ws: more than 100000 entries)" in unknown.reason
    # Every decision is logged with the bounded list.
    logged = records(dsh_home)
    assert [r["decision"] for r in logged] == ["approve_once", "approve_once", "deny", "deny"]
    assert logged[0]["changes"] is None
    assert logged[2]["changes"] == {"created": ["/tmp/x\x1b[2J"], "modified": ["/work/Makefile"], "deleted": [],
                                    "total": 2, "incomplete": []}


def test_a_session_approval_does_not_cover_changed_inputs(tmp_path: Path) -> None:
    approver = rules(tmp_path, decision="session")
    assert approver.approve_escalation(req(FileChanges())).outcome == "approve_session"
    again = approver.approve_escalation(req(MAKEFILE))
    assert not again.approved  # asked again, and the rules file says no
    assert approver.approve_escalation(req(FileChanges())).approved  # remembered for an unchanged tree


def test_the_prompt_lists_the_changes_escaped(tmp_path: Path) -> None:
    out = io.StringIO()
    approver = PromptApproval(Context(), PromptConfig(timeout_s=5), input=io.StringIO("y\n"), output=out)
    many = FileChanges(modified=("/work/Makefile",), created=tuple(f"/work/f{i}" for i in range(30)), total=31)
    assert approver.approve_escalation(req(many)).approved  # a person may approve, having seen it
    shown = out.getvalue()
    assert "31 file(s) under the writable roots" in shown
    assert "modified  /work/Makefile" in shown and "created   /work/f0" in shown
    assert "... and 11 more" in shown
    out.seek(0)
    out.truncate()
    approver.prompter.input = io.StringIO("n\n")
    assert not approver.approve_escalation(req(MAKEFILE)).approved
    assert "/tmp/x\\x1b[2J" in out.getvalue() and "\x1b[2J" not in out.getvalue()
    out.seek(0)
    out.truncate()
    approver.prompter.input = io.StringIO("n\n")
    approver.approve_escalation(req(FileChanges.unknown("/ws: cannot list")))
    assert "NOT KNOWN:     what changed: /ws: cannot list" in out.getvalue()


def test_the_rules_fallback_prompt_shows_what_the_rule_did_not_approve(tmp_path: Path) -> None:
    approver = rules(tmp_path, fallback="prompt", tty=str(tmp_path / "no-tty"))
    decision = approver.approve_escalation(req(MAKEFILE))
    assert not decision.approved and "no terminal" in decision.reason  # the prompt was asked, not the rule


class ChangesWhileAsked(Approval):
    """Approves, while something left behind rewrites a file under the roots."""

    def __init__(self, victim: Path) -> None:
        super().__init__(Context())
        self.victim = victim
        self.seen: list[EscalationRequest] = []

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        self.seen.append(request)
        self.victim.write_text("rewritten while the person read the prompt\n")
        return EscalationDecision.approve_session("yes")


def test_an_approval_is_withdrawn_when_the_files_change_while_asked(
    workspace: Path, trusted_dir: Path, dsh_home: Path
) -> None:
    need_runner("bwrap")
    profile = trusted_dir / "quiet.toml"
    profile.write_text('extends = "workspace-write"\nexclude_tmp = true\n')
    (workspace / "Makefile").write_text("all:\n\ttrue\n")
    spec = SessionSpec(profile=str(profile), workspace=str(workspace), runner="bwrap", executor="bash-sandbox")
    with build_session(spec) as ctx:
        shell = ctx.require(ShellExecutor)
        run = shell.resolve(ShellExecRequest(command=f"touch {trusted_dir}/outside"))
        approver = ChangesWhileAsked(workspace / "Makefile")
        before = escalation.watch(approver, run)
        assert before is not None and str(workspace / "Makefile") in before.entries
        result = shell.execute(run).result()
        assert result.sandbox is not None and result.sandbox.denied
        grant = escalation.after_denial(ctx, shell, run, result, tool="t", owner="o", requested_by="by a test",
                                        approval=approver, before=before)
        assert grant is not None and not grant.approved
        assert "changed while the approval was asked" in grant.decision.reason
        assert str(workspace / "Makefile") in grant.decision.reason
        [asked] = approver.seen
        assert asked.changes is not None and asked.changes.clean  # the denied run itself changed nothing
        # The session approval is forgotten with it.
        again = escalation.after_denial(ctx, shell, run, result, tool="t", owner="o", requested_by="by a test",
                                        approval=approver, before=escalation.watch(approver, run))
        assert again is not None and len(approver.seen) == 2
    assert [r["decision"] for r in records(dsh_home)][:2] == ["approve_session", "deny"]
    assert not (trusted_dir / "outside").exists()


def test_watch_costs_nothing_without_an_approver(workspace: Path) -> None:
    spec = SessionSpec(mode="workspace-write", workspace=str(workspace), executor="bash-sandbox")
    with build_session(spec) as ctx:
        run = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="true"))
        assert escalation.watch(None, run) is None
        from dsh.sandbox.approval import DenyAllApproval

        assert escalation.watch(DenyAllApproval(Context()), run) is None


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_models_request_to_repeat_a_denied_command_is_judged_as_its_rerun(
    runner: str, workspace: Path, trusted_dir: Path, dsh_home: Path
) -> None:
    """The tool path: the model runs a command, it is denied after rewriting an
    input, and the model then asks for the same command under a wider mode.
    The rules file names that command, yet approves nothing: the request is a
    re-run of what the denied run left.  A denied run that changed nothing is
    still approved by the same rule."""
    from dsh.tools.toolbox import call_tool

    need_runner(runner)
    outside = trusted_dir / "outside"
    rewrites = f"echo 'all:; touch {trusted_dir}/pwned' > Makefile; touch {outside}"
    plain = f"touch {outside}"
    rules_file = trusted_dir / "rules.toml"
    rules_file.write_text("".join(
        f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{workspace}"\ncommand = "{cmd}"\ndecision = "once"\n'
        for cmd in (rewrites.replace('"', '\\"'), plain)
    ))
    profile = trusted_dir / "quiet.toml"
    accept = ('accept_degraded = ["landlock-protected-paths", "landlock-metadata", "landlock-hidden-metadata",'
              ' "landlock-process-list"]\n' if runner == "landlock" else "")
    profile.write_text(f'extends = "workspace-write"\nexclude_tmp = true\n{accept}')
    spec = SessionSpec(profile=str(profile), workspace=str(workspace), runner=runner, executor="bash-sandbox",
                       approval=f"rules:{rules_file}")
    wider = {"sandbox_permissions": "danger-full-access", "justification": "it needs to write outside"}
    with build_session(spec) as ctx:
        first = call_tool(ctx, "bash", {"command": rewrites, "description": "d"}, owner="model")
        assert "sandbox: file access denied" in first.content, first.content
        assert (workspace / "Makefile").exists() and not outside.exists()
        again = call_tool(ctx, "bash", {"command": rewrites, "description": "d", **wider}, owner="model")
        assert again.is_error and "Makefile" in again.content, again.content
        assert not outside.exists()
        # The control: a denied run that changed nothing, the same kind of rule.
        denied = call_tool(ctx, "bash", {"command": plain, "description": "d"}, owner="model")
        assert "sandbox: file access denied" in denied.content, denied.content
        approved = call_tool(ctx, "bash", {"command": plain, "description": "d", **wider}, owner="model")
        assert not approved.is_error, approved.content
        assert outside.exists()
    decisions = [(r["command"], r["decision"]) for r in records(dsh_home)]
    assert decisions == [(rewrites, "deny"), (plain, "approve_once")]
