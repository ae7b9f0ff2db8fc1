"""A terminal session on envd's PTY API: the far side of ``dsh.sandbox.terminal_frames``.

The session's exact argv starts through envd's ``Start`` with a ``pty``
config (see ``command.pty_process_argv``): envd allocates the pty inside the
sandbox, makes the command lead a new session with it as its controlling
terminal, and streams its output as ``pty`` data events (to stdout here).
The frames arriving on stdin become the SDK's PTY calls:

- ``d`` -> ``sandbox.pty.send_stdin`` (envd ``SendInput`` with ``ProcessInput.pty``);
- ``w`` -> ``sandbox.pty.resize`` (envd ``Update``: TIOCSWINSZ, SIGWINCH);
- ``k`` -> the signal to the terminal's foreground process group, sent as root
  by ``pty_probe`` (envd's ``SendSignal`` reaches only the started process,
  and only with SIGTERM or SIGKILL); SIGKILL never to the shell's own group;
- ``e`` -> ``^D`` typed (envd has no EOF for a pty: ``CloseStdin`` refuses it);
- the end of stdin -> hang up: every process of the session is killed.

Status lines (stderr): ``state`` once the output has been quiet for a moment
after a change, then again with a growing pause while nothing changes; the
``reading`` and ``shell`` bits come from ``pty_probe`` run as root in the
sandbox, one envd command per look, so they lag the relay's by that command's
round trip (the runner's ``explain`` says so).
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from pathlib import Path
from typing import Any

from dsh.runners.e2b.process import E2BProcess
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.stdin_feed import StdinFeed
from dsh.sandbox.terminal_frames import (
    DATA,
    EOF,
    RESIZE,
    SIGNAL,
    Frame,
    FrameError,
    FrameReader,
    resize_body,
    state_line,
)

_QUIET_S = 0.05
_MAX_PAUSE_S = 1.0
_CHUNK = 16 << 10  # what envd reads from a pty at once
_PROBE_TIMEOUT_S = 30.0


@functools.lru_cache(maxsize=1)
def probe_source() -> str:
    return Path(__file__).with_name("pty_probe.py").read_text(encoding="utf-8")


def probe_script(*args: int | str) -> str:
    """``python3 -I -S -c <probe> ARGS`` as one ``/bin/sh`` script (the args are numbers and words)."""
    import shlex

    return shlex.join(["python3", "-I", "-S", "-c", probe_source(), *map(str, args)])


class E2BTerminal(E2BProcess):
    """A terminal session: an ``E2BProcess`` whose stdin carries frames for envd's PTY API."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._frames = 0  # frames applied (their SDK calls returned)
        self._applying = False
        self._last_output = time.monotonic()
        self._changed = threading.Event()
        self._shell = True
        super().__init__(*args, **kwargs)
        threading.Thread(target=self._report, name=f"e2b-tty-state-{self.pid}", daemon=True).start()

    # -- input --------------------------------------------------------------------------
    def _feed_input(self, stdin: bytes | StdinFeed) -> None:
        reader = FrameReader()
        chunks = stdin.chunks(64 << 10) if isinstance(stdin, StdinFeed) else iter((stdin,))
        try:
            for chunk in chunks:
                for frame in reader.feed(chunk):
                    if self.wait(0) is not None:
                        return
                    self._applying = True
                    try:
                        self._apply(frame)
                    finally:
                        self._frames += 1
                        self._applying = False
                        self._last_output = time.monotonic()
                        self._changed.set()
        except FrameError as exc:
            self._note(f"dsh: e2b: bad terminal input, hanging up: {exc}")
        except Exception as exc:  # the sandbox went away: the stream reports it
            self._note(f"dsh: e2b: terminal input failed, hanging up: {type(exc).__name__}: {exc}")
        finally:
            if isinstance(stdin, StdinFeed):
                stdin.abandon()
            self._hang_up()

    def _apply(self, frame: Frame) -> None:
        pty = self.session.sandbox.pty
        if frame.kind == DATA:
            for start in range(0, len(frame.body), _CHUNK):
                pty.send_stdin(self.pid, frame.body[start:start + _CHUNK])
        elif frame.kind == EOF:
            pty.send_stdin(self.pid, b"\x04")
        elif frame.kind == RESIZE:
            size = resize_body(frame.body)
            if size is not None and all(size):
                from e2b.sandbox.commands.command_handle import PtySize

                pty.resize(self.pid, PtySize(rows=size[0], cols=size[1]))
        elif frame.kind == SIGNAL and len(frame.body) == 1:
            try:
                self.session.run_internal(probe_script("signal", self.pid, frame.body[0]),
                                          what="signalling the terminal's foreground programs",
                                          timeout=_PROBE_TIMEOUT_S)
            except SandboxUnavailable as exc:
                if self.session.dead:
                    raise
                # The session goes on; the settle shows the signal had no effect.
                self._note(f"dsh: e2b: the signal did not reach the terminal: {exc.reason}")

    def _hang_up(self) -> None:
        """The host side went away or closed the session: kill all of it."""
        if self.wait(0) is None and not self.session.dead:
            self.session.kill_tree(self.pid, int(signal.SIGKILL), self.token, group=True, session=True)

    def kill(self, sig: int) -> None:
        if not self.session.dead:
            live = self.wait(0) is None
            self.session.kill_tree(self.pid, sig, self.token, group=live, session=live)

    # -- output and status ------------------------------------------------------------------
    def _output_written(self, size: int) -> None:
        super()._output_written(size)
        self._last_output = time.monotonic()
        self._changed.set()

    def _note(self, text: str) -> None:
        self._emit(f"\n{text}\n".encode())

    def _emit(self, line: bytes) -> None:
        with self._io_lock:
            if not self._io_closed:
                self._write(self._stderr_w, line)

    def _probe(self) -> tuple[bool, bool]:
        try:
            words = self.session.run_internal(
                probe_script("state", self.pid), what="looking at the terminal",
                timeout=_PROBE_TIMEOUT_S).split()
        except SandboxUnavailable:
            return False, self._shell
        if len(words) != 2:
            return False, self._shell
        return words[0] == "1", words[1] == "1"

    def _report(self) -> None:
        reported: tuple[int, bool, int, bool] | None = None
        pause = _QUIET_S
        while self.wait(0) is None and not self.session.dead:
            if self._changed.wait(pause):
                self._changed.clear()
                pause = _QUIET_S
            quiet = time.monotonic() - self._last_output
            if self._applying or quiet < _QUIET_S:
                pause = _QUIET_S
                continue
            seen = (self._out_bytes, self._frames)
            reading, shell = self._probe()
            if (self._out_bytes, self._frames) != seen or self._applying or self.wait(0) is not None:
                pause = _QUIET_S
                continue  # something happened meanwhile: look again
            self._shell = shell
            state = (seen[0], reading, seen[1], shell)
            if state != reported:
                reported = state
                self._emit(state_line(*state))
            pause = min(pause * 2, _MAX_PAUSE_S)
