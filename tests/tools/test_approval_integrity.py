"""Approvals are bound to the workdir, and what the person approving reads is real."""

from __future__ import annotations

import io
import os
import pty
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.cli.run_output import SGR_RESET, Visible
from dsh.sandbox.approval import Approval, EscalationDecision, EscalationRequest
from dsh.sandbox.approval_rules import RulesApproval, RulesConfig
from dsh.sandbox.context import Context
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.terminal_prompt import TerminalPrompter
from dsh.sandbox.terminal_text import TERMINAL_RESET, printable

from tests.support.cli import dsh_home_for, trusted_config_dir
from tests.support.sandboxed import need_runner
from tests.support.terminal import read_terminal

WS = SandboxMode.WORKSPACE_WRITE
RO = SandboxMode.READ_ONLY
#: What a terminal would act on: ESC (and so CSI/OSC), C1 CSI/OSC, BEL, CR, BS,
#: bidi overrides and isolates, line separators.
ACTIVE = ["\x1b", "\x9b", "\x9d", "\x07", "\r", "\x08", "\u202e", "\u2066", "\u2028"]


@pytest.fixture(autouse=True)
def dsh_home(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DSH_HOME", str(trusted_dir / "dsh-home"))
    yield trusted_dir / "dsh-home"


def req(command: str, workdir: str, mode: SandboxMode = WS) -> EscalationRequest:
    return EscalationRequest(command, workdir, RO, mode, "needed", "bash", "agent")


# -- the workdir is part of every approval -------------------------------------------------
def test_rule_for_dir_a_does_not_approve_dir_b(trusted_dir: Path) -> None:
    a, b = trusted_dir / "a", trusted_dir / "b"
    (a / "sub").mkdir(parents=True)
    b.mkdir()
    path = trusted_dir / "rules.toml"
    path.write_text(
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{a}"\ncommand = "git status"\n\n'
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{trusted_dir}/*"\nprefix = "make"\nargs = []\n\n'
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{a}/**"\nprefix = "ls"\nargs = []\n'
    )
    approver = RulesApproval(Context(), RulesConfig(path=str(path)))
    assert approver.approve_escalation(req("git status", str(a))).approved
    assert not approver.approve_escalation(req("git status", str(b))).approved
    assert not approver.approve_escalation(req("git status", str(a / "sub"))).approved
    assert approver.approve_escalation(req("make", str(b))).approved  # a glob: one level
    assert not approver.approve_escalation(req("make", str(a / "sub"))).approved
    assert approver.approve_escalation(req("ls", str(a / "sub"))).approved  # a tree
    assert not approver.approve_escalation(req("ls", str(b))).approved
    # A link to A does not make B look like A, nor A like B: the canonical dir counts.
    (trusted_dir / "link-to-b").symlink_to(b)
    assert not approver.approve_escalation(req("git status", str(trusted_dir / "link-to-b"))).approved
    (trusted_dir / "link-to-a").symlink_to(a)
    assert approver.approve_escalation(req("git status", str(trusted_dir / "link-to-a"))).approved


class Once(Approval):
    def __init__(self) -> None:
        super().__init__(Context())
        self.asked = 0

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        self.asked += 1
        return EscalationDecision.approve_session("yes") if self.asked == 1 else EscalationDecision.deny("no")


def test_session_approval_is_per_workdir_and_mode(trusted_dir: Path) -> None:
    approver = Once()
    assert approver.approve_escalation(req("git status", str(trusted_dir))).approved
    assert approver.approve_escalation(req("git status", str(trusted_dir))).approved  # remembered
    assert not approver.approve_escalation(req("git status", "/")).approved  # another dir asks again
    full = req("git status", str(trusted_dir), SandboxMode.DANGER_FULL_ACCESS)
    assert not approver.approve_escalation(full).approved  # another mode asks again
    assert approver.asked == 3


def test_run_rule_for_dir_a_does_not_approve_dir_b(trusted_dir: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    a, b = trusted_dir / "a", trusted_dir / "b"
    a.mkdir()
    b.mkdir()
    rules = trusted_config_dir() / f"rules-{tmp_path.name}.toml"
    rules.write_text(f'[[rule]]\nmode = "workspace-write"\nworkdir = "{a}"\ncommand = "touch made"\n')
    env = {**os.environ, "DSH_HOME": str(dsh_home_for(tmp_path))}
    import subprocess

    def run(ws: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "bwrap", "--mode", "read-only",
             "--workspace", str(ws), "--approval", f"rules:{rules}", "-c", "touch made"],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )

    denied = run(b)
    assert denied.returncode == 1 and f"in {b} for workspace-write" in denied.stderr, denied.stderr
    assert not (b / "made").exists()
    approved = run(a)
    assert approved.returncode == 0, approved.stderr
    assert (a / "made").exists()


# -- the prompt shows only escaped text -----------------------------------------------------
SPOOF = (
    "true\r\x1b[2K\x1b[1A  command:       ls\x1b]0;title\x07\x1b]52;c;ZWNobw==\x1b\\"
    "\x9b2J\x08\u202etxt.exe\u2066\u2028"
)


def test_printable_escapes_everything_a_terminal_acts_on() -> None:
    shown = printable(SPOOF)
    assert not any(c in shown for c in ACTIVE), repr(shown)
    assert "\\x0d\\x1b[2K" in shown and "\\u202e" in shown and "\\x9b2J" in shown
    assert "\\x1b]0;title\\x07" in shown and "\\u2028" in shown


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("out", [io.StringIO(), Terminal()])
def test_prompt_output_has_no_active_sequence(out: io.StringIO) -> None:
    request = EscalationRequest(SPOOF, f"/w{SPOOF}", RO, WS, f"because{SPOOF}", f"bash{SPOOF}",
                                f"me{SPOOF}")
    decision = TerminalPrompter(5, input=io.StringIO("n\n"), output=out).ask(request, "approval-prompt")
    assert not decision.approved
    text = out.getvalue()
    if isinstance(out, Terminal):  # a terminal is reset first: nothing open stays active
        assert text.startswith(TERMINAL_RESET)
        text = text[len(TERMINAL_RESET):]
    assert not any(c in text for c in ACTIVE), repr(text)
    assert "  command:       true\\x0d\\x1b[2K" in text and "read-only -> workspace-write" in text
    assert "  workdir:       /wtrue\\x0d" in text


def test_visible_filter_keeps_text_and_breaks_sequences() -> None:
    visible = Visible()
    out = visible(b"ok\tline\n\x1b[8mhidden\x1b]0;t\x07\r") + visible("é€".encode()[:3]) + visible("é€".encode()[3:])
    assert out.decode() == "ok\tline\n\\x1b[8mhidden\\x1b]0;t\\x07\\x0dé€"


def test_command_output_cannot_spoof_the_real_prompt(workspace: Path, tmp_path: Path) -> None:
    """On a real pty: the denied command prints hidden text, a title OSC left
    open and a fake prompt; none of it reaches the terminal as a sequence."""
    need_runner("bwrap")
    env = {**os.environ, "DSH_HOME": str(dsh_home_for(tmp_path))}
    command = ("printf '\\033[8m\\033]0;x\\033[2J\\r  command:       ls\\n'; echo a >> a.txt"
               " # \r\x1b[2K\u202e")
    argv = [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "bwrap", "--mode", "read-only",
            "--workspace", str(workspace), "--approval", "prompt", "-c", command]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    try:
        shown = read_terminal(fd, time.monotonic() + 120, b"n\n")
    finally:
        os.waitpid(pid, 0)
        os.close(fd)
    # Our own resets (before the prompt, before each note) are the only sequences allowed.
    text = shown.decode(errors="replace").replace(TERMINAL_RESET, "").replace(SGR_RESET, "")
    assert "\x1b" not in text and "\u202e" not in text, repr(text)
    assert "\\x1b[8m\\x1b]0;x\\x1b[2J\\x0d  command:       ls" in text  # the output, visible
    assert "# \\x0d\\x1b[2K\\u202e" in text  # the command line in the prompt, escaped
    assert not (workspace / "a.txt").exists()
