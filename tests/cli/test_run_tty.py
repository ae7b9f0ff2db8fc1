"""``run -t``: the command on a pty inside the sandbox, attached to the caller's terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
import time
from pathlib import Path

import pytest
from dsh.cli.tty_filter import HostTerminalFilter

from tests.support.sandboxed import accept_for, need_runner
from tests.support.wait import PATIENCE_S, readable


class Attached:
    """The CLI started on a pty of ours, as a person's terminal would run it."""

    def __init__(self, workspace: Path, runner: str, *argv: str, rows: int = 24, cols: int = 80,
                 command: str = "run") -> None:
        need_runner(runner)
        accept = [f"--accept-degraded={n}" for n in accept_for(runner)]
        rest = ["--", *argv] if command == "run" else []
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(workspace)
            os.execv(sys.executable, [sys.executable, "-P", "-m", "dsh.cli", command, "--runner", runner, *accept,
                                      "--workspace", str(workspace), *rest])
        self.resize(rows, cols)
        self.seen = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def expect(self, needle: bytes) -> bytes:
        deadline = time.monotonic() + PATIENCE_S
        while needle not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {needle!r}; the terminal shows {self.seen[-2000:]!r}")
            ready = readable(self.fd, 0.5)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the run ended before {needle!r}; it showed {self.seen[-2000:]!r}")
                self.seen += chunk
        at = self.seen.index(needle) + len(needle)
        before, self.seen = self.seen[:at], self.seen[at:]
        return before

    def type(self, data: bytes) -> None:
        os.write(self.fd, data)

    def status(self) -> int:
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            try:
                ready = readable(self.fd, 0.5)
                if ready:
                    self.seen += os.read(self.fd, 65536)
            except OSError:
                pass
            pid, raw = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(raw)
        raise AssertionError("the run did not end")


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker"])
def test_python_interactive_ctrl_c_window_size_and_status(workspace: Path, runner: str) -> None:
    run = Attached(workspace, runner, "python3", "-q", rows=30, cols=100)
    run.expect(b">>> ")
    run.type(b"import os; os.get_terminal_size()\r")
    run.expect(b"columns=100, lines=30")
    run.resize(40, 120)  # the kernel sends SIGWINCH to the CLI, which passes the size on
    run.expect(b"\r>>> ")  # readline redraws its line on the new size
    run.type(b"os.get_terminal_size()\r")
    run.expect(b"columns=120, lines=40")
    run.type(b"import time; time.sleep(1000)\r")
    run.expect(b"time.sleep(1000)")
    run.type(b"\x03")
    run.expect(b"KeyboardInterrupt")
    run.expect(b">>> ")
    run.type(b"raise SystemExit(5)\r")
    assert run.status() == 5


def test_tty_prints_a_pts_path(workspace: Path) -> None:
    run = Attached(workspace, "bwrap", "tty")
    shown = run.expect(b"\n")
    assert shown.strip().startswith(b"/dev/pts/"), shown
    assert run.status() == 0


def test_escape_sequences_aimed_at_the_host_terminal_are_dropped(workspace: Path) -> None:
    hostile = ("printf 'A\\033]52;c;ZXZpbA==\\007B\\033]0;title\\033\\\\C\\033[21tD\\033P$q\"p\\033\\\\E"
               "\\033[31mred\\033[0m\\n'")
    run = Attached(workspace, "bwrap", "sh", "-c", hostile)
    shown = run.expect(b"red")
    assert b"ABCD" in shown and b"E\x1b[31m" in shown, shown
    for bad in (b"\x1b]", b"\x1b[21t", b"\x1bP"):
        assert bad not in shown
    assert run.status() == 0


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker", "gvisor"])
def test_sequences_written_past_the_pty_to_the_relays_stderr_are_shown_escaped(workspace: Path, runner: str) -> None:
    """The relay's stderr is its own channel to the host's terminal; the program
    can write there too (``/proc/$PPID/fd/2``), where no screen filter stood."""
    hostile = ("for fd in /proc/$PPID/fd/2; do printf 'X\\033]52;c;ZXZpbA==\\007\\033]2;PWNED\\007Y\\n' > $fd "
               "2>/dev/null; done; echo done")
    run = Attached(workspace, runner, "sh", "-c", hostile)
    shown = run.expect(b"done")
    assert run.status() == 0
    shown += run.seen
    assert b"\x1b]" not in shown and b"\x07" not in shown, shown
    assert b"X\\x1b]52;c;ZXZpbA==\\x07" in shown, shown  # it reached the terminal, escaped


def test_filter_holds_sequences_split_across_reads() -> None:
    filt = HostTerminalFilter()
    out = b"".join(filt(bytes([b])) for b in b"x\x1b]52;c;QQ==\x07y\x1b[2Jz\x1b[8;1;1tw")
    assert out == b"xy\x1b[2Jzw"


def test_filter_drops_the_8_bit_controls_and_keeps_other_text() -> None:
    """U+009D is OSC and U+009B is CSI to a terminal that takes 8-bit controls
    in UTF-8 (xterm does): dropped like their ESC forms; é (C3 A9) and
    U+00A0 (C2 A0) are text.  Byte by byte too: a read may split the pair."""
    hostile = "a\u009d52;c;QQ==\u009cb\u009b2Jc é\u00a0d".encode()
    for feed in (lambda f: f(hostile), lambda f: b"".join(f(bytes([b])) for b in hostile)):
        out = feed(HostTerminalFilter())
        assert "\u009d" not in out.decode() and "\u009b" not in out.decode(), out
        assert out == "a52;c;QQ==b2Jc é\u00a0d".encode(), out


@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_shell_is_an_interactive_bash_in_the_sandbox(workspace: Path, runner: str) -> None:
    run = Attached(workspace, runner, command="shell")
    run.expect(b"ws")  # the prompt (with the directory): bash drops what is typed before it is ready
    run.type(b"echo in-$(basename $PWD)-$(tty | cut -c1-9); echo x > /etc/dsh-shell-escape; exit 4\r")
    run.expect(b"in-ws-/dev/pts/")
    assert run.status() == 4
    assert not Path("/etc/dsh-shell-escape").exists()
