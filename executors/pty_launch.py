"""The host side of the terminal relay (``pty_relay``): its argv, its frames and its status lines.

The relay runs as ``python3 -I -S -c <source> --rows R --cols C -- ARGV...``:
the exact argv stays a list to the end (the relay ``execvp``s it), and the
source travels in the argv, so nothing of this package has to be readable
inside the sandbox.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.executors.seam import TerminalSize
from dsh.sandbox.runner import LocalLaunch
from dsh.sandbox.terminal_frames import HEADER as _HDR
from dsh.sandbox.terminal_frames import MAX_FRAME, STATUS_PREFIX

#: What the relay reads from the environment: the pty pair the host opened.
HOST_PTY_ENV = "DSH_TTY_FDS"


@functools.lru_cache(maxsize=1)
def relay_source() -> str:
    return (Path(__file__).with_name("pty_relay.py")).read_text(encoding="utf-8")


def relay_argv(python: str, size: TerminalSize, argv: tuple[str | bytes, ...]) -> tuple[str | bytes, ...]:
    return (python, "-I", "-S", "-c", relay_source(), "--rows", str(size.rows), "--cols", str(size.cols),
            "--", *argv)


# -- frames (host -> relay; the format: ``dsh.sandbox.terminal_frames``) ---------------------
def frame(kind: bytes, body: bytes = b"") -> bytes:
    return _HDR.pack(kind, len(body)) + body


def data_frames(data: bytes) -> bytes:
    out = bytearray()
    for start in range(0, len(data), MAX_FRAME):
        out += frame(b"d", data[start:start + MAX_FRAME])
    return bytes(out)


def resize_frame(rows: int, cols: int) -> bytes:
    return frame(b"w", struct.pack(">HH", rows, cols))


def signal_frame(sig: int) -> bytes:
    return frame(b"k", bytes([sig]))


def eof_frame() -> bytes:
    return frame(b"e")


# -- status lines (relay -> host, on stderr) ----------------------------------------------
@dataclass(frozen=True)
class RelayState:
    """The relay's last word: output so far, whether the foreground waits on the terminal."""

    out_bytes: int = 0
    reading: bool = False
    frames: int = 0
    #: The foreground process group is the started program's (the shell at its prompt).
    shell_foreground: bool = True


@dataclass(frozen=True)
class RelayExit:
    exit_code: int | None
    signal: int | None


class StatusParser:
    """Splits the relay's stderr into status lines and other text (a wrapper's own errors)."""

    def __init__(self) -> None:
        self._partial = b""
        self.state = RelayState()
        self.exit: RelayExit | None = None
        self.other = bytearray()

    def feed(self, data: bytes) -> None:
        self._partial += data
        while b"\n" in self._partial:
            line, self._partial = self._partial.split(b"\n", 1)
            if not line.startswith(STATUS_PREFIX):
                self.other += line + b"\n"
                continue
            words = line[len(STATUS_PREFIX):].split()
            try:
                if words[0] == b"state" and len(words) == 5:
                    self.state = RelayState(int(words[1]), words[2] == b"1", int(words[3]), words[4] == b"1")
                elif words[0] == b"exit" and len(words) == 3:
                    code, sig = int(words[1]), int(words[2])
                    self.exit = RelayExit(None if code < 0 else code, sig or None)
            except (ValueError, IndexError):
                self.other += line + b"\n"
        if len(self._partial) > 4096:  # not a status line: keep it as text
            self.other += self._partial
            self._partial = b""


# -- a pty opened by the host -----------------------------------------------------------------
class HostPty:
    """A pty pair opened here for one session, for runners whose sandbox has no
    ``/dev/ptmx`` of its own and may not open the host's (no mount namespace,
    ``/dev/pts`` outside the ``/dev`` allowlist).  An inherited fd still works,
    and the pair is this session's own, never the caller's terminal.

    ``env`` names the pair for the relay: it goes into the environment given to
    ``prepare`` (a runner that hands the command its environment through a hop
    passes it on) and into the launch's own.  ``attach`` passes the fds and
    closes the host's copies as soon as the relay is spawned."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        for fd in (self.master, self.slave):
            os.set_inheritable(fd, False)
        self._closed = False

    @property
    def env(self) -> dict[str, str]:
        return {HOST_PTY_ENV: f"{self.master},{self.slave}"}

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for fd in (self.master, self.slave):
                os.close(fd)

    def attach(self, launch: LocalLaunch) -> LocalLaunch:
        return _with_pty(launch, self)


def _with_pty(launch: LocalLaunch, pair: HostPty) -> LocalLaunch:
    master, slave = pair.master, pair.slave
    inner = launch.spawn_in
    close_ours = pair.close

    def spawn_in(fn: Callable[[], Any]) -> Any:
        try:
            return inner(fn) if inner is not None else fn()
        finally:
            close_ours()

    cleanup = launch.cleanup

    def cleanup_all() -> None:
        close_ours()
        if cleanup is not None:
            cleanup()

    return dataclasses.replace(
        launch,
        env={**launch.env, **pair.env},
        pass_fds=(*launch.pass_fds, master, slave),
        spawn_in=spawn_in,
        cleanup=cleanup_all,
    )
