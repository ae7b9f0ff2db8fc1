"""The terminal relay's status lines, checked against the bytes it forwards."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from dsh.executors.pty_launch import StatusParser, relay_argv, signal_frame
from dsh.executors.seam import TerminalSize

#: Answers each SIGINT with a line and goes straight back to reading the terminal.
_ANSWERS_SIGINT = (
    "import os, signal\n"
    "signal.signal(signal.SIGINT, lambda *_: os.write(1, b'interrupted\\n'))\n"
    "os.write(1, b'ready\\n')\n"
    "while True:\n"
    "    os.read(0, 100)\n"
)
_ANSWER = len(b"interrupted\r\n")


def test_a_reading_state_counts_what_the_program_printed_before_it_read() -> None:
    # The host ends a settle on "reading" once it has as many bytes as the
    # state names: a state that counts too few ends it before the answer.
    argv = relay_argv(sys.executable, TerminalSize(24, 80), (sys.executable, "-c", _ANSWERS_SIGINT))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    drain = threading.Thread(target=lambda: proc.stdout.read() if proc.stdout else None, daemon=True)
    drain.start()
    status = StatusParser()

    def next_reading(frames: int) -> int:
        while not (status.state.frames == frames and status.state.reading):
            chunk = proc.stderr.readline() if proc.stderr else b""
            assert chunk, (status.other, status.state)
            status.feed(chunk)
        return status.state.out_bytes

    try:
        ready = next_reading(0)
        assert ready == len(b"ready\r\n"), ready
        for n in range(1, 41):
            proc.stdin.write(signal_frame(signal.SIGINT))
            proc.stdin.flush()
            assert next_reading(n) == ready + n * _ANSWER, n
    finally:
        proc.kill()
        proc.wait()
