"""What an attack on approvals found, in-process: typeahead, the log, the
prompt's text, the memory of denied runs, the words a prefix rule lets
through, hard-linked input files and the escalation log's place."""

from __future__ import annotations

import json
import os
import pty
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.approval import (
    TERMINAL_RESET,
    Approval,
    EscalationDecision,
    EscalationRequest,
    TerminalPrompter,
    command_shown,
)
from dsh.sandbox.approval_rules import RulesApproval, RulesConfig, load_rules
from dsh.sandbox.command_words import dangerous_word
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.file_changes import FileChanges
from dsh.sandbox.input_files import InputFileError, read_input_file
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy_guard import refuse_writable_log

FULL = SandboxMode.DANGER_FULL_ACCESS
WS = SandboxMode.WORKSPACE_WRITE
RO = SandboxMode.READ_ONLY


@pytest.fixture(autouse=True)
def dsh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh-home"))
    yield tmp_path / "dsh-home"


def req(command: str, workdir: str = "/work", justification: str = "needed", **kw: object) -> EscalationRequest:
    return EscalationRequest(command, workdir, WS, FULL, justification, "bash", "agent", **kw)  # type: ignore[arg-type]


# -- E1: keys typed before the question are no answer ---------------------------------------------
def test_typeahead_does_not_answer_the_prompt() -> None:
    """A command printed its own ``[y/N]``; the user typed ``y`` and Enter; the
    command never read it.  On a real terminal that ``y`` is queued before our
    question appears: it must not approve."""
    master, slave = pty.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # keep the test's reads to what the prompter writes
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        os.write(master, b"y\n")  # typed ahead, before anything asked
        with os.fdopen(os.dup(slave), "r") as inp, os.fdopen(os.dup(slave), "w") as out:
            decision = TerminalPrompter(0.5, input=inp, output=out).ask(req("make"), "approval-prompt")
    finally:
        os.close(master)
        os.close(slave)
    assert not decision.approved and decision.reason == "no answer within 0.5s", decision


def test_an_answer_typed_after_the_question_still_counts() -> None:
    master, slave = pty.openpty()
    try:
        seen = b""

        def answer_when_asked() -> None:
            nonlocal seen
            deadline = time.monotonic() + 30
            while b"[N]o (default" not in seen and time.monotonic() < deadline:
                seen += os.read(master, 4096)
            os.write(master, b"y\n")

        import threading

        thread = threading.Thread(target=answer_when_asked)
        thread.start()
        with os.fdopen(os.dup(slave), "r") as inp, os.fdopen(os.dup(slave), "w") as out:
            decision = TerminalPrompter(30, input=inp, output=out).ask(req("make"), "approval-prompt")
        thread.join()
    finally:
        os.close(master)
        os.close(slave)
    assert decision.outcome == "approve_once", decision


# -- E2c: the reset before the prompt turns wrapping and colours back -----------------------------
def test_the_reset_restores_wrapping_and_default_colours() -> None:
    assert "\x1b[?7h" in TERMINAL_RESET  # a command's \e[?7l would cut the command: line
    for osc in ("110", "111", "112"):  # OSC 10/11/12 colours a command set, reset
        assert f"\x1b]{osc}\x1b\\" in TERMINAL_RESET
    assert "\x1b[4l" in TERMINAL_RESET and "\x1b[?6l" in TERMINAL_RESET  # insert and origin modes off
    # No query (whose answer the terminal would type back): only these private modes.
    rest = TERMINAL_RESET
    for mode in ("\x1b[?1049l", "\x1b[?25h", "\x1b[?7h", "\x1b[?6l"):
        rest = rest.replace(mode, "")
    assert "?" not in rest


# -- BAD-1: the log is ASCII: bytes that are no UTF-8 and control characters -------------------------
class Deny(Approval):
    def decide(self, request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision.deny("no")


def test_the_log_takes_any_argv_and_stores_no_active_character(dsh_home: Path) -> None:
    hostile = "touch \udcff\x1b]52;c;Zm9v\x07\x9b2J\u202e"
    decision = Deny(Context()).approve_escalation(req(hostile, argv=("touch", "\udcff\x1b\u202e"),
                                             justification="why \ud800"))
    assert decision.outcome == "deny" and decision.reason == "no"  # not a log failure
    raw = (dsh_home / "escalations.jsonl").read_bytes()
    assert raw.isascii() and b"\x1b" not in raw and b"\x07" not in raw, raw
    [record] = [json.loads(line) for line in raw.decode().splitlines()]
    assert record["command"] == hostile and record["justification"] == "why \ud800"


# -- E7: the log is never opened through a link -----------------------------------------------------
def test_a_symlinked_log_is_not_followed(dsh_home: Path, tmp_path: Path) -> None:
    class Yes(Approval):
        def decide(self, request: EscalationRequest) -> EscalationDecision:
            return EscalationDecision.approve_once("yes")

    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    dsh_home.mkdir()
    (dsh_home / "escalations.jsonl").symlink_to(victim)
    decision = Yes(Context()).approve_escalation(req("make"))
    assert not decision.approved and "audit log" in decision.reason  # unauditable: denied
    assert victim.read_text() == "keep\n"


def test_a_log_inside_a_writable_root_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "dsh").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"escalation log .*inside the writable root .*set DSH_HOME"):
        refuse_writable_log(ws / "dsh" / "escalations.jsonl", [ws])
    refuse_writable_log(tmp_path / "elsewhere" / "escalations.jsonl", [ws])  # outside: fine


# -- BAD-4: a long command cannot hide its start ---------------------------------------------------
def test_long_blank_runs_are_counted_and_a_long_command_says_its_length() -> None:
    command = "touch X;" + " " * 20000 + "ls -la"
    shown = command_shown(command)
    assert "touch X;[20000 spaces]ls -la" in shown
    assert "length:        20014 characters" in shown
    assert len(shown) < 200
    assert command_shown("a  b") == "  command:       a  b\n"  # short runs as they are
    assert "[40 tabs]" in command_shown("a" + "\t" * 40)


# -- E3: the memory of denied runs is by words, and outlives a one-shot session -------------------------
CHANGED = FileChanges(modified=("/work/build.sh",), total=1)


def test_respacing_does_not_forget_a_denied_run(tmp_path: Path) -> None:
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('[[rule]]\nmode = "danger-full-access"\nworkdir = "/"\nargv = ["bash", "build.sh"]\n')
    approver = RulesApproval(None, RulesConfig(path=str(rules_file)))
    approver.remember_denied_run("agent", "bash build.sh", "/", CHANGED)
    for respaced in ("bash  build.sh", "bash\tbuild.sh", " bash build.sh ", "bash 'build.sh'"):
        assert approver.denied_run_changes("agent", respaced, "/") == CHANGED, respaced
    assert approver.denied_run_changes("agent", "bash other.sh", "/") is None
    # A command that is no simple command is remembered by its exact string.
    approver.remember_denied_run("agent", "bash build.sh; true", "/", CHANGED)
    assert approver.denied_run_changes("agent", "bash build.sh;  true", "/") is None


def test_denied_runs_outlive_the_approver_when_kept(dsh_home: Path) -> None:
    first = Deny(Context())
    first.keep_denied_runs()
    first.remember_denied_run("cli", "bash build.sh", "/", CHANGED)
    second = Deny(Context())  # the next one-shot call
    assert second.denied_run_changes("cli", "bash  build.sh", "/") is None  # not kept: not read
    second.keep_denied_runs()
    assert second.denied_run_changes("cli", "bash  build.sh", "/") == CHANGED
    assert second.denied_run_changes("other", "bash build.sh", "/") is None
    store = dsh_home / "denied-runs.jsonl"
    assert store.stat().st_mode & 0o777 == 0o600


def test_a_damaged_or_linked_store_reads_as_not_known(dsh_home: Path, tmp_path: Path) -> None:
    dsh_home.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("")
    (dsh_home / "denied-runs.jsonl").symlink_to(target)
    approver = Deny(Context())
    approver.keep_denied_runs()
    found = approver.denied_run_changes("cli", "make", "/")
    assert found is not None and not found.clean  # no rule approves "not known"
    approver.remember_denied_run("cli", "make", "/", CHANGED)  # logged, never written through the link
    assert target.read_text() == ""


# -- E5: words that run a program never ride on a prefix rule ---------------------------------------
ATTACKS = [
    (["cargo", "build"], "+./tc"),
    (["cargo", "build"], "+nightly"),
    (["git", "submodule"], "foreach"),
    (["git", "bisect"], "run"),
    (["git"], "filter-branch"),
    (["git", "filter-branch"], "--tree-filter=./x"),
    (["git", "filter-branch"], "--index-filter"),
    (["git", "filter-branch"], "--msg-filter"),
    (["git", "filter-branch"], "--env-filter"),
    (["git", "filter-branch"], "--commit-filter"),
    (["git"], "instaweb"),
    (["git", "instaweb"], "--httpd=./x"),
    (["git", "instaweb"], "-d"),
    (["git", "log"], "--output=/etc/x"),
    (["git", "diff"], "--output"),
    (["git", "format-patch"], "-o"),
    (["git", "format-patch"], "--output-directory=/x"),
    (["git", "commit"], "-t"),
    (["git", "commit"], "--template=./x"),
    (["git", "difftool"], "--extcmd=./x"),
    (["git", "difftool"], "-x"),
    (["git", "rebase"], "--exec=./x"),
    (["git"], "config"),
    (["npm"], "exec"),
    (["npm"], "x"),
    (["npm", "exec"], "-c"),
    (["make"], "SHELL=./x"),
]


@pytest.mark.parametrize(("prefix", "word"), ATTACKS, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_words_that_run_a_program_are_refused_in_a_rules_file(prefix: list[str], word: str, tmp_path: Path) -> None:
    assert dangerous_word([*prefix, word], word) is not None
    for rule in (f"prefix = {json.dumps(prefix)}\nargs = [{json.dumps(word)}]\n",  # listed after it
                 f"prefix = {json.dumps([*prefix, word])}\nargs = []\n"):  # or in the prefix itself
        path = tmp_path / "rules.toml"
        path.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "/work"\n{rule}')
        with pytest.raises(ConfigError, match="never approved by a prefix rule"):
            load_rules(path)


def test_the_new_words_leave_ordinary_ones_alone() -> None:
    assert dangerous_word(["git", "checkout", "-b"], "-b") is None  # a new branch
    assert dangerous_word(["git", "diff", "-o"], "-o") is None
    assert dangerous_word(["git", "log", "run"], "run") is None  # a path named run, no bisect
    assert dangerous_word(["cargo", "build"], "--release") is None


# -- E6: a hard-linked input file is refused --------------------------------------------------------
def test_a_hard_linked_rules_file_is_refused(trusted_dir: Path, tmp_path: Path) -> None:
    rules = trusted_dir / "rules.toml"
    rules.write_text('[[rule]]\nmode = "danger-full-access"\nworkdir = "/work"\ncommand = "make"\n')
    os.link(rules, trusted_dir / "also-here.toml")  # the other name: inside a workspace, say
    with pytest.raises(InputFileError, match=r"has 2 hard links .*cp .*rules.toml.new && mv"):
        read_input_file(str(rules))
    with pytest.raises(ConfigError, match="has 2 hard links"):
        RulesApproval(None, RulesConfig(path=str(rules)))
    os.unlink(trusted_dir / "also-here.toml")
    assert RulesApproval(None, RulesConfig(path=str(rules))).rules  # a name of its own: read


def test_the_store_directory_is_not_reached_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link where the store's directory should be is not followed: nothing
    is created or written where it points."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "dsh").symlink_to(elsewhere)
    monkeypatch.setenv("DSH_HOME", str(home / "dsh"))
    approver = Deny(Context())
    approver.keep_denied_runs()
    found = approver.denied_run_changes("cli", "make", "/")  # read: nothing created there either
    assert found is not None and not found.clean
    approver.remember_denied_run("cli", "make", "/", CHANGED)  # logged, not raised
    assert list(elsewhere.iterdir()) == []
    # Records a command wrote where the link points are not read as ours.
    (elsewhere / "denied-runs.jsonl").write_text(
        '{"changes": {"changed": [], "known": true}, "key": "make", "owner": "cli", "time": 9e9, "workdir": "/"}\n')
    found = approver.denied_run_changes("cli", "make", "/")
    assert found is not None and not found.clean


def test_a_fifo_store_does_not_hang(dsh_home: Path) -> None:
    dsh_home.mkdir()
    os.mkfifo(dsh_home / "denied-runs.jsonl")
    approver = Deny(Context())
    approver.keep_denied_runs()
    found = approver.denied_run_changes("cli", "make", "/")
    assert found is not None and not found.clean  # not a regular file: not known
    approver.remember_denied_run("cli", "make", "/", CHANGED)  # refused, not blocked
