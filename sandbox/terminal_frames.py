"""The wire format between a terminal session's host side and what runs its pty.

Two implementations sit on the far side of it: the terminal relay
(``dsh.executors.pty_relay``, inside the sandbox) and a runner whose sandbox
has a PTY API of its own (``Runner.terminal_pty == "runner"``), which takes the
frames on the command's stdin and writes the status lines on its stderr
itself.  Either way the host side (``dsh.executors.pty_launch``, the terminal
backends, ``run -t``) is the same.

Frames on stdin: one type byte, a 4-byte big-endian length, the payload:
``d`` bytes to type, ``w`` window size (rows, cols as two 16-bit numbers),
``k`` a signal number for the foreground process group, ``e`` end of input
(the pty gets EOF, ``^D``).  The end of stdin itself means: hang up and kill
everything the session started.

Status lines on stderr start with ``STATUS_PREFIX`` and carry
``state <out-bytes> <reading:0|1> <frames> <shell:0|1>`` (the foreground
process group is, or is not, blocked reading the terminal after
``out-bytes`` bytes of output and ``frames`` input frames; it is, or is not,
the started program's own) and, last, ``exit <code> <signal>``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct(">cI")
STATUS_PREFIX = b"\x1edsh-tty "
MAX_FRAME = 1 << 20
DATA, RESIZE, SIGNAL, EOF = b"d", b"w", b"k", b"e"


@dataclass(frozen=True)
class Frame:
    kind: bytes
    body: bytes


class FrameError(ValueError):
    """The stream is not made of frames (a frame over ``MAX_FRAME``)."""


class FrameReader:
    """Splits a byte stream into frames, across arbitrary chunk boundaries."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[Frame]:
        self._pending += data
        out: list[Frame] = []
        while len(self._pending) >= HEADER.size:
            kind, size = HEADER.unpack_from(self._pending)
            if size > MAX_FRAME:
                raise FrameError(f"a terminal frame of {size} bytes (at most {MAX_FRAME})")
            if len(self._pending) < HEADER.size + size:
                break
            out.append(Frame(kind, self._pending[HEADER.size:HEADER.size + size]))
            self._pending = self._pending[HEADER.size + size:]
        return out


def resize_body(body: bytes) -> tuple[int, int] | None:
    """(rows, cols) of a well-formed ``w`` frame."""
    if len(body) != 4:
        return None
    rows, cols = struct.unpack(">HH", body)
    return rows, cols


def state_line(out_bytes: int, reading: bool, frames: int, shell: bool) -> bytes:
    return STATUS_PREFIX + f"state {out_bytes} {int(reading)} {frames} {int(shell)}".encode() + b"\n"


def exit_line(exit_code: int | None, sig: int | None) -> bytes:
    return STATUS_PREFIX + f"exit {-1 if exit_code is None else exit_code} {sig or 0}".encode() + b"\n"
