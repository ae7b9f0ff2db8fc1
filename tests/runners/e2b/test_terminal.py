"""A terminal session and a persistent bash on the e2b runner, through the envd double.

The session runs on envd's PTY API through the real SDK: the double allocates
a real pty inside its emulated machine for the ``Start`` that carried a pty
config, and records every ``Start``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.terminal_bash import BashTerminalSession
from dsh.executors.terminal_registry import TerminalRegistry
from dsh.executors.terminal_seam import TerminalOpenRequest, TerminalSendRequest
from dsh.runners.e2b import E2BRunner
from dsh.sandbox.context import build_context
from dsh.tools.toolbox import call_tool

from tests.runners.e2b.conftest import Envd
from tests.runners.e2b.envd_server import envd_double
from tests.runners.e2b.helpers import policy
from tests.support.wait import wait_until

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


def machine_processes(envd: Envd) -> list[str]:
    """The command lines of every process in the double's machine but its own two
    (bwrap's pid 1 and the ``sleep infinity`` it runs as pid 2)."""
    machine = envd_double(envd.url).machine
    found = [f"{inside}: {cmdline}" for _host, inside, cmdline in machine.host_processes() if inside not in ("1", "2")]
    return found


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


def test_close_leaves_no_process_in_the_machine(ctx: Any, envd: Envd) -> None:
    reg = ctx.require(TerminalRegistry)
    entry = reg.open("me", TerminalOpenRequest())
    # A background job in its own process group, one that drops the run token
    # from its environment, and a foreground python: all of them must go.
    reg.send(entry.id, "me", TerminalSendRequest("sleep 1001 & env -i /bin/sleep 1002 &"), **SETTLE)
    snap = reg.send(entry.id, "me", TerminalSendRequest("python3 -q"), **SETTLE)
    assert snap.text.endswith(">>>"), snap.text
    running = machine_processes(envd)
    assert any("sleep 1001" in p for p in running) and any("sleep 1002" in p for p in running), running
    assert reg.close_session(entry.id, "me") is True
    wait_until(lambda: not machine_processes(envd), lambda: f"left in the machine: {machine_processes(envd)}")


def test_the_session_runs_on_envds_pty_api(ctx: Any, envd: Envd) -> None:
    reg = ctx.require(TerminalRegistry)
    entry = reg.open("me", TerminalOpenRequest(rows=31, cols=97))
    assert entry.session.initial.wait_reason == "stdin_read"
    starts = envd_double(envd.url).starts
    on_pty = [s for s in starts if s.pty is not None]
    # One Start carried a pty config of the requested size, for the exact
    # argv of the shell (behind the runner's own /bin/sh exec line), as the
    # policy's user; no relay (a python3 started with a source and frames).
    assert [s.pty for s in on_pty] == [(31, 97)], starts
    assert on_pty[0].argv[:2] == ("/bin/sh", "-c"), on_pty[0]
    assert "set -- bash --noprofile --norc -i;" in on_pty[0].argv[2], on_pty[0]
    assert on_pty[0].user == "dsh", on_pty[0]
    assert not any("dsh-tty" in " ".join(s.argv) for s in starts), starts
    # The pty is the machine's own (its devpts), sized as asked.
    snap = reg.send(entry.id, "me", TerminalSendRequest("tty; stty size"), **SETTLE)
    lines = snap.text.splitlines()
    assert "31 97" in lines and any(line.startswith("/dev/pts/") for line in lines), snap.text
    assert reg.close_session(entry.id, "me") is True


def test_resize_reaches_the_program(ctx: Any) -> None:
    reg = ctx.require(TerminalRegistry)
    entry = reg.open("me", TerminalOpenRequest(rows=24, cols=80))
    session = entry.session
    assert isinstance(session, BashTerminalSession)
    waiter = ("python3 -q -c \"import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, "
              "{signal.SIGWINCH}); print('ready', flush=True); signal.sigwait({signal.SIGWINCH}); "
              "print('winch', *os.get_terminal_size())\"")
    snap = reg.send(entry.id, "me", TerminalSendRequest(waiter), **SETTLE)
    assert snap.text.endswith("ready"), snap.text
    session.resize(40, 120)
    snap = reg.read(entry.id, "me", **SETTLE)
    assert "winch 120 40" in snap.text, snap.text
    snap = reg.send(entry.id, "me", TerminalSendRequest("stty size"), **SETTLE)
    assert "40 120" in snap.text.splitlines(), snap.text
    assert reg.close_session(entry.id, "me") is True


@pytest.mark.parametrize(("name", "shown"), [("SIGTERM", "Terminated"), ("SIGHUP", "Hangup"),
                                             ("SIGKILL", "Killed"), ("SIGTSTP", "Stopped")])
def test_signals_reach_the_foreground_group(ctx: Any, name: str, shown: str) -> None:
    reg = ctx.require(TerminalRegistry)
    entry = reg.open("me", TerminalOpenRequest())
    snap = reg.send(entry.id, "me", TerminalSendRequest("sleep 1000"), **SETTLE)
    assert snap.wait_reason == "inferred_idle", snap
    assert entry.session.shell_foreground is False
    snap = reg.send(entry.id, "me", TerminalSendRequest("", submit=False, signal=name), **SETTLE)
    assert shown in snap.text and snap.wait_reason == "stdin_read", snap.text
    assert entry.session.alive and entry.session.shell_foreground is True
    assert reg.close_session(entry.id, "me") is True


def test_persistent_bash_keeps_cd_and_export(ctx: Any) -> None:
    call_tool(ctx, "bash", {"command": "cd /tmp && export KEPT=yes", "description": "d"}, owner="a")
    got = call_tool(ctx, "bash", {"command": 'echo "$KEPT $PWD"', "description": "d"}, owner="a")
    assert got.content.rstrip("\n") == "yes /tmp", got.content


def test_explain_declares_the_pty_paths_limits(runner: E2BRunner, workspace: Path) -> None:
    plan = runner.explain(policy("workspace-write", workspace))
    assert any("envd's PTY API" in rule for rule in plan.rules), plan.rules
    assert any("stdin_read" in gap and "probe" in gap for gap in plan.cannot), plan.cannot
    assert any("setsid" in gap and "terminal_close" in gap for gap in plan.cannot), plan.cannot
