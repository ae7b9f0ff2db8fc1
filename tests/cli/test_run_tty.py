"""``run -t``: the command on a pty inside the sandbox, attached to the caller's terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import random
import re
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


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker", "gvisor"])
def test_escape_sequences_aimed_at_the_host_terminal_are_dropped(workspace: Path, runner: str) -> None:
    # Plain forms, then the ones an attack got through a filter that did not
    # parse as terminals do: ESC ESC, an ESC inside a CSI, inside half a
    # UTF-8 character.
    hostile = ("printf 'A\\033]52;c;ZXZpbA==\\007B\\033]0;title\\033\\\\C\\033[21tD\\033P$q\"p\\033\\\\E"
               "\\033\\033]52;c;ZXZpbA==\\007\\033[\\033]2;PWNED\\007\\302\\033]52;c;ZXZpbA==\\007"
               "\\033\\033P$q\"p\\033\\\\\\033[31mred\\033[0m\\n'")
    run = Attached(workspace, runner, "sh", "-c", hostile)
    shown = run.expect(b"red")
    assert b"ABCD" in shown and b"E\x1b[31m" in shown, shown
    for bad in (b"\x1b]", b"\x1b[21t", b"\x1bP", b"PWNED", b"ZXZpbA", b"$q"):
        assert bad not in shown, (bad, shown)
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


#: What a terminal may still be sent: text, C0 controls, CSI sequences other
#: than window operations, and ESC sequences that open no string.  Parsed here
#: independently of the filter.
_ALLOWED_SEQUENCE = re.compile(rb"\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x73\x75-\x7e]"
                               rb"|\x1b[\x20-\x2f]+[\x30-\x7e]|\x1b[\x30-\x4f\x51-\x57\x59-\x5a\x5c\x60-\x7e]")


def _only_allowed(out: bytes) -> str | None:
    """Why ``out`` could act beyond the screen, or None."""
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8: {exc}"
    if any(0x80 <= ord(ch) <= 0x9F for ch in text):
        return "an 8-bit control"
    rest = _ALLOWED_SEQUENCE.sub(b"", out)
    if b"\x1b" in rest or b"\x18" in rest or b"\x1a" in rest:
        return f"an ESC, CAN or SUB outside a whole allowed sequence: {rest!r}"
    return None


@pytest.mark.parametrize("hostile", [
    b"\x1b\x1b]52;c;QQ==\x07",  # ESC ESC: the second one starts the sequence
    b"\x1b[\x1b]52;c;QQ==\x07",  # an ESC inside a CSI starts a new sequence
    b"\xc2\x1b]52;c;QQ==\x07",  # an ESC inside half a UTF-8 character
    b"\xe2\x80\x1b]2;PWNED\x07",
    b"\x1b\x1bP$q\"p\x1b\\",  # DCS the same way
    b"\x1b[\x1b[21t",  # a title report through an aborted CSI
    b"\x1b]52;c;QQ==\x18\x1b]52;c;QQ==\x07",  # CAN aborts, the next OSC is dropped too
    b"\x9d52;c;QQ==\x9c\x9b21t",  # raw 8-bit controls (a terminal not in UTF-8 mode)
    b"\x1b[1\x1b]0;t\x07",
    b"\x1b(\x1b]52;c;QQ==\x07",  # an ESC inside an ESC sequence's intermediates
])
def test_filter_parses_as_a_terminal_does(hostile: bytes) -> None:
    """Forms an attack got past the filter to the host terminal's clipboard and
    title: each OSC, DCS and window operation is gone, whole or byte by byte."""
    framed = b"A" + hostile + b"B\x1b[31mC"
    for feed in (lambda f: f(framed), lambda f: b"".join(f(bytes([b])) for b in framed)):
        out = feed(HostTerminalFilter())
        assert _only_allowed(out) is None, (out, _only_allowed(out))
        assert out.startswith(b"A") and out.endswith(b"B\x1b[31mC"), out
        assert b"PWNED" not in out and b"$q" not in out, out


def test_filter_output_is_always_safe_for_random_input() -> None:
    """Random mixes of the bytes that start, end and abort sequences: the output
    never holds more than the allowed forms, and no way of splitting the input
    into reads changes it."""
    rng = random.Random(1234)
    alphabet = [b"\x1b", b"[", b"]", b"P", b"X", b"^", b"_", b"5", b";", b"c", b"t", b"?", b"(", b" ", b"\x07",
                b"\\", b"\x9b", b"\x9d", b"\x9c", b"\xc2", b"\xe2\x80", b"\x18", b"\x1a", b"\x7f", b"\n", b"a",
                "\u00e9".encode(), "\u009b".encode()]
    for _ in range(3000):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        whole = HostTerminalFilter()(data) + HostTerminalFilter()(b"")
        cut = rng.randint(0, len(data))
        filt = HostTerminalFilter()
        split = filt(data[:cut]) + filt(data[cut:])
        assert whole == split, (data, cut)
        # What is held at the end (an unfinished sequence) is never written:
        # judge the output followed by plain text.
        follower = HostTerminalFilter()
        checked = follower(data) + follower(b"\x18zz")
        assert _only_allowed(checked) is None, (data, checked, _only_allowed(checked))


@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_shell_is_an_interactive_bash_in_the_sandbox(workspace: Path, runner: str) -> None:
    run = Attached(workspace, runner, command="shell")
    run.expect(b"ws")  # the prompt (with the directory): bash drops what is typed before it is ready
    run.type(b"echo in-$(basename $PWD)-$(tty | cut -c1-9); echo x > /etc/dsh-shell-escape; exit 4\r")
    run.expect(b"in-ws-/dev/pts/")
    assert run.status() == 4
    assert not Path("/etc/dsh-shell-escape").exists()


def test_the_reset_at_the_end_gives_the_shell_its_terminal_back() -> None:
    """A program that leaves insert and origin modes on, wrapping off, a scroll
    region, line drawing as the character set (SO) and the cursor hidden
    garbles the person's shell after it; what ``run -t`` writes at the end
    undoes each, on a real terminal emulator."""
    import pyte
    from dsh.cli.tty_filter import RESET

    screen = pyte.Screen(80, 24)
    stream = pyte.ByteStream(screen)
    left_on = b"\x1b[4h\x1b[?6h\x1b[?7l\x1b[3;5r\x1b)0\x0e\x1b[?25l\x1b[1;31m"
    stream.feed(HostTerminalFilter()(left_on))  # the modes pass the filter: programs need them
    assert pyte.modes.IRM in screen.mode and pyte.modes.DECOM in screen.mode and screen.margins is not None
    stream.feed(RESET)
    assert pyte.modes.IRM not in screen.mode and pyte.modes.DECOM not in screen.mode
    assert pyte.modes.DECAWM in screen.mode and pyte.modes.DECTCEM in screen.mode
    assert screen.margins is None
    stream.feed(b"q")  # SI is back: ASCII, not a line-drawing glyph
    assert screen.buffer[screen.cursor.y][screen.cursor.x - 1].data == "q"
    assert screen.cursor.attrs.fg == "default" and not screen.cursor.attrs.bold
    for mode in (b"?1l", b"?1004l", b"?1006l", b"?2004l", b"?1049l"):
        assert b"\x1b[" + mode in RESET  # what pyte does not model: cursor keys, reports, paste
    assert b"\x1b>" in RESET
