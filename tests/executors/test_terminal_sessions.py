"""PTY sessions on the real runners: interactive programs, signals, the terminal's own
ioctls, floods, a program that never reads, and nothing left running after close."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from dsh.executors.terminal_registry import TerminalRegistry
from dsh.executors.terminal_seam import TerminalOpenRequest, TerminalSendRequest, TerminalSnapshot

from tests.support.processes import describe, pids_with
from tests.support.terminals import TERMINAL_RUNNERS, terminal_ctx
from tests.support.wait import wait_until

SETTLE = {"settle_ms": 60_000, "idle_ms": 3_000}


def _sleeper(mark: str) -> str:
    """A long sleep whose command line carries ``mark``."""
    return f"sh -c 'sleep 1000; :' {mark}"


def _send(reg: TerminalRegistry, sid: str, text: str, **kw: object) -> TerminalSnapshot:
    return reg.send(sid, "me", TerminalSendRequest(text, **kw), **SETTLE)  # type: ignore[arg-type]


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_python_interactive_interrupted_and_closed_leaves_nothing(workspace: Path, runner: str) -> None:
    mark = f"dsh-term-{secrets.token_hex(4)}"
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest(rows=20, cols=70))
        first = reg.read(entry.id, "me", **SETTLE)
        assert first.wait_reason == "stdin_read", first
        assert first.text.endswith(("$", "#")), first.text
        # Background work the session starts: a job, a setsid daemon, a double fork.
        _send(reg, entry.id, f"{_sleeper(mark + '-a')} & setsid {_sleeper(mark + '-b')} & ({_sleeper(mark + '-c')} &)")
        wait_until(lambda: len(pids_with(mark)) == 3, "the three background sleeps")
        snap = _send(reg, entry.id, "python3 -q")
        assert snap.wait_reason == "stdin_read" and snap.text.endswith(">>>"), snap
        snap = _send(reg, entry.id, "6*7")
        assert "42" in snap.viewport and snap.wait_reason == "stdin_read"
        snap = _send(reg, entry.id, "import time; time.sleep(1000)")
        assert snap.wait_reason == "inferred_idle", snap
        snap = reg.send(entry.id, "me", TerminalSendRequest("", submit=False, signal="SIGINT"), **SETTLE)
        assert "KeyboardInterrupt" in snap.text and snap.text.endswith(">>>"), snap.text
        assert snap.wait_reason == "stdin_read"
        assert reg.close_session(entry.id, "me") is True
        assert pids_with(mark) == [], describe(pids_with(mark))


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_cd_and_export_persist_and_the_pty_is_the_sandboxes(workspace: Path, runner: str) -> None:
    (workspace / "sub").mkdir()
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest())
        _send(reg, entry.id, "cd sub && export DSH_T_VAR=kept")
        snap = _send(reg, entry.id, 'echo "[$DSH_T_VAR]" "$(basename "$PWD")"; tty; echo hi > f')
        assert "[kept] sub" in snap.viewport
        assert any(line.startswith("/dev/pts/") for line in snap.viewport), snap.text
        # Outside the workspace the policy holds, as for one-shot commands.
        snap = _send(reg, entry.id, "echo x > /etc/dsh-term-escape; echo rc=$?")
        assert "rc=1" in snap.viewport, snap.text
        reg.close_session(entry.id, "me")
    assert (workspace / "sub" / "f").read_text() == "hi\n"
    assert not Path("/etc/dsh-term-escape").exists()


_INJECT = (
    "import fcntl, termios, sys\n"
    "for name, req, arg in (('TIOCSTI', termios.TIOCSTI, b'x'), ('TIOCLINUX', 0x541C, bytes([2]) * 8)):\n"
    "    try:\n"
    "        fcntl.ioctl(0, req, arg)\n"
    "        print(name, 'ALLOWED')\n"
    "    except OSError as e:\n"
    "        print(name, 'refused', e.errno)\n"
)


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_tiocsti_and_tioclinux_are_refused_on_the_sessions_own_pty(workspace: Path, runner: str) -> None:
    (workspace / "inject.py").write_text(_INJECT)
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest())
        snap = _send(reg, entry.id, "python3 inject.py")
        assert "TIOCSTI refused 1" in snap.viewport, snap.text
        assert not any("ALLOWED" in line for line in snap.viewport), snap.text
        reg.close_session(entry.id, "me")


@pytest.mark.parametrize("runner", ["bwrap"])
def test_a_flood_keeps_the_screen_bounded(workspace: Path, runner: str) -> None:
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest(rows=10, cols=40))
        snap = _send(reg, entry.id, "yes 'flood flood flood flood flood flood flood flood flood' | head -c 20000000")
        assert len(snap.viewport) == 10 and all(len(line) <= 40 for line in snap.viewport)
        assert snap.scrollback_lines <= 1000
        assert snap.wait_reason in ("stdin_read", "inferred_idle")
        reg.close_session(entry.id, "me")


def test_what_vim_prints_at_start_leaves_the_session_working(workspace: Path) -> None:
    """vim starts with ``CSI ? 4 m`` (and other forms pyte's handlers refuse):
    the screen ignores them and the session keeps answering."""
    with terminal_ctx(workspace, "bwrap") as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest(rows=10, cols=60))
        snap = _send(reg, entry.id, r"printf '\033[?4m\033[1;2Aone\n'")
        assert "one" in snap.viewport, snap.viewport
        snap = _send(reg, entry.id, "echo two-$((1+1))")
        assert "two-2" in snap.viewport and snap.wait_reason == "stdin_read", snap
        reg.close_session(entry.id, "me")


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_program_that_never_reads_cannot_hang_a_send(workspace: Path, runner: str) -> None:
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest())
        _send(reg, entry.id, "stty -icanon; sleep 1000")
        # Far more than the pty and the pending-input cap hold: refused, not hung.
        with pytest.raises(Exception, match="not reading its input"):
            for _ in range(200):
                reg.send(entry.id, "me", TerminalSendRequest("z" * 4000, submit=False), settle_ms=0, idle_ms=0)
        assert reg.close_session(entry.id, "me") is True


@pytest.mark.parametrize("runner", ["bwrap"])
def test_exit_ends_the_session_with_its_status(workspace: Path, runner: str) -> None:
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest())
        snap = _send(reg, entry.id, "exit 7")
        assert snap.wait_reason == "session_exit" and snap.exit_code == 7, snap


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_teardown_of_the_context_kills_every_session(workspace: Path, runner: str) -> None:
    mark = f"dsh-term-{secrets.token_hex(4)}"
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        for owner in ("a", "b"):
            entry = reg.open(owner, TerminalOpenRequest())
            reg.send(entry.id, owner, TerminalSendRequest(f"setsid {_sleeper(mark)} &"), **SETTLE)
        wait_until(lambda: len(pids_with(mark)) == 2, "both sleeps")
    assert pids_with(mark) == [], describe(pids_with(mark))


_HOLDER = """
import sys
from dsh.sandbox.context import build_context
from dsh.executors.terminal_registry import TerminalRegistry
from dsh.executors.terminal_seam import TerminalOpenRequest, TerminalSendRequest
ws, runner, accept, mark = sys.argv[1], sys.argv[2], sys.argv[3].split(",") if sys.argv[3] else [], sys.argv[4]
ctx = build_context([
    {"id": "policy", "name": "sandbox-policy",
     "config": {"mode": "workspace-write", "workspace": ws, "accept_degraded": accept}},
    {"id": "sandbox", "name": "sandbox", "config": {"runner": runner}},
    {"id": "shell", "name": "bash-sandbox", "config": {"cwd": ws}},
    {"id": "terminals", "name": "terminals", "config": {}},
    {"id": "terminal-bash", "name": "terminal-bash", "config": {}},
])
reg = ctx.require(TerminalRegistry)
entry = reg.open("me", TerminalOpenRequest())
reg.send(entry.id, "me", TerminalSendRequest(
    f"sh -c 'sleep 1000; :' {mark}-a & setsid sh -c 'sleep 1000; :' {mark}-b & echo started"),
    settle_ms=60000, idle_ms=3000)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_sigkill_of_the_host_process_leaves_nothing(workspace: Path, runner: str) -> None:
    import subprocess
    import sys

    from tests.support.sandboxed import accept_for, need_runner

    need_runner(runner)
    mark = f"dsh-term-{secrets.token_hex(4)}"
    holder = subprocess.Popen([sys.executable, "-P", "-c", _HOLDER, str(workspace), runner,
                               ",".join(accept_for(runner)), mark], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        # The holder's own command line names the mark too.
        wait_until(lambda: len([p for p in pids_with(mark) if p != holder.pid]) == 2, "both sleeps")
        holder.kill()  # SIGKILL: no teardown runs in it
        holder.wait()
        wait_until(lambda: not pids_with(mark), lambda: "the session's processes to die: " + describe(pids_with(mark)))
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_a_session_under_limits_gets_its_pty(workspace: Path, runner: str, trusted_dir: Path) -> None:
    """Limits put host-side helpers (prlimit, the cgroup join) in front of the
    relay, which then gets its environment through a hop: the pty still arrives."""
    profile = trusted_dir / "limited.toml"
    profile.write_text('extends = "workspace-write"\n[limits]\nmax_processes = 512\nmax_memory = "2GiB"\n')
    with terminal_ctx(workspace, runner, profile=str(profile)) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest())
        assert entry.session.initial is not None and entry.session.initial.wait_reason == "stdin_read", (
            entry.session.initial)
        snap = _send(reg, entry.id, "tty; ulimit -u")
        assert any(line.startswith("/dev/pts/") for line in snap.viewport), snap.text
        reg.close_session(entry.id, "me")


@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_a_session_works_when_the_host_holds_over_1024_descriptors(workspace: Path, runner: str) -> None:
    """A long-lived host (a server, a long test run) may hold more than
    FD_SETSIZE descriptors; the pty pair it opens then has high numbers,
    which the relay keeps."""
    from tests.support.descriptors import soft_nofile_at_least

    with soft_nofile_at_least(1200):
        filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
        try:
            with terminal_ctx(workspace, runner) as ctx:
                reg = ctx.require(TerminalRegistry)
                entry = reg.open("me", TerminalOpenRequest())
                snap = _send(reg, entry.id, "echo high-$((40 + 2))")
                assert "high-42" in snap.viewport, snap.text
                reg.close_session(entry.id, "me")
        finally:
            for fd in filler:
                os.close(fd)


_ANSWERS_SIGINT = (
    "import os, signal\n"
    "signal.signal(signal.SIGINT, lambda *_: os.write(1, b'interrupted\\n'))\n"
    "while True:\n"
    "    os.read(0, 100)\n"
)


@pytest.mark.parametrize("runner", ["landlock"])
def test_a_signal_settles_on_what_the_program_printed_after_it(workspace: Path, runner: str) -> None:
    # A reader that answers a signal and goes straight back to reading: the
    # settle must not end on "waits for input" before the answer is on screen.
    (workspace / "answers.py").write_text(_ANSWERS_SIGINT)
    with terminal_ctx(workspace, runner) as ctx:
        reg = ctx.require(TerminalRegistry)
        entry = reg.open("me", TerminalOpenRequest())
        _send(reg, entry.id, "clear; python3 answers.py")
        for n in range(1, 21):
            snap = reg.send(entry.id, "me", TerminalSendRequest("", submit=False, signal="SIGINT"), **SETTLE)
            assert snap.viewport.count("interrupted") == n and snap.wait_reason == "stdin_read", (n, snap)
        reg.close_session(entry.id, "me")
