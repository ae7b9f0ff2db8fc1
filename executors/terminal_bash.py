"""``terminal-bash``: the terminal backend that runs bash (or pwsh) on a pty inside the sandbox.

A session is one execution of the mounted shell executor with the exact argv
of an interactive shell, ``terminal`` set (the relay allocates the pty inside
the sandbox, see ``pty_relay``, or the runner's own PTY API does) and a
``StdinFeed`` carrying the frames of ``dsh.sandbox.terminal_frames``: so it
runs under the same runner, policy, limits, environment scrub and teardown as
a one-shot command, and a runner that cannot enforce the
policy refuses it the same way.

Readiness: the shell's prompt is ours.  bash gets a controlled ``PS1`` that
``PROMPT_COMMAND`` re-asserts before every prompt (pwsh a ``prompt``
function); it carries an invisible, per-session nonce (an OSC sequence the
screen drops), so a program cannot fake it without reading it first.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from dsh.executors.pty_launch import StatusParser, data_frames, eof_frame, resize_frame, signal_frame
from dsh.executors.seam import ShellExecRequest, ShellExecution, ShellExecutor, TerminalSize
from dsh.executors.signal_names import signal_name
from dsh.executors.terminal_registry import TerminalRegistry
from dsh.executors.terminal_screen import TerminalScreen
from dsh.executors.terminal_seam import (
    ALLOWED_SIGNALS,
    DEFAULT_SCROLLBACK,
    TerminalBackend,
    TerminalBackendSession,
    TerminalOpenRequest,
    TerminalSendRequest,
    TerminalSnapshot,
    WaitReason,
)
from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.stdin_feed import FeedClosed, StdinFeed

_POLL_S = 0.02
_WRITE_TIMEOUT_S = 5.0
PROMPT_OSC = "\x1b]6973;dsh-prompt-{nonce}\x07"


@dataclass(frozen=True)
class TerminalBashConfig:
    #: Lines kept above the viewport.
    scrollback: int = DEFAULT_SCROLLBACK
    #: Typed input waiting for a program that does not read, at most.
    max_pending_input: int = 1 << 16
    #: Output held between two looks at it (the screen is fed continuously).
    max_output_bytes: int = 1 << 20
    #: How long opening waits for the shell's first prompt.
    start_ms: int = 30_000


def bash_argv() -> tuple[str, ...]:
    return ("bash", "--noprofile", "--norc", "-i")


def bash_env(nonce: str) -> dict[str, str]:
    ps1 = r"\[" + PROMPT_OSC.format(nonce=nonce) + r"\]\w\$ "
    # PROMPT_COMMAND re-asserts PS1 before each prompt, so a command that
    # changes PS1 cannot break readiness for the next one.
    return {
        "PS1": ps1,
        "PROMPT_COMMAND": "PS1=" + _bash_quote(ps1),
        "PS2": "> ",
        "TERM": "xterm",
        "HISTFILE": "/dev/null",
    }


def pwsh_argv(nonce: str) -> tuple[str, ...]:
    osc = "`e]6973;dsh-prompt-" + nonce + "`a"
    prompt = 'function global:prompt { "' + osc + 'PS $($executionContext.SessionState.Path.CurrentLocation)> " }'
    return ("pwsh", "-NoLogo", "-NoProfile", "-NoExit", "-Command", prompt)


def _bash_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class BashTerminalSession(TerminalBackendSession):
    def __init__(self, execution: ShellExecution, feed: StdinFeed, screen: TerminalScreen, nonce: str) -> None:
        self.execution = execution
        self.feed = feed
        self.screen = screen
        self.prompt = PROMPT_OSC.format(nonce=nonce).encode()
        self.status = StatusParser()
        self._cond = threading.Condition()
        self._out = 0  # stdout bytes fed to the screen
        self._err = 0
        self._lost = False
        self._frames = 0  # frames written to the relay
        self._last_output = time.monotonic()
        self._tail = b""  # the last bytes seen, to find the prompt across reads
        self._prompts = 0  # prompts seen so far
        self._stop = threading.Event()
        self.initial: TerminalSnapshot | None = None
        self._capture: tuple[bytearray, bytearray, int] | None = None  # head, tail, half
        self._dropped = 0
        self._reader = threading.Thread(target=self._pull_loop, name="dsh-terminal", daemon=True)
        self._reader.start()

    # -- output -------------------------------------------------------------------------
    def _pull_loop(self) -> None:
        while not self._stop.is_set():
            done = self.execution.done
            self._pull()
            if done:
                self._pull()
                with self._cond:
                    self._cond.notify_all()
                return
            self._stop.wait(_POLL_S)

    def _pull(self) -> None:
        observed = self.execution.observed
        data, end = observed.read("stdout", self._out)
        err, err_end = observed.read("stderr", self._err)
        with self._cond:
            if end - len(data) > self._out:
                self._lost = True
            if data:
                self._record(data)
                self.screen.feed(data)
                self._last_output = time.monotonic()
                scan = self._tail + data
                self._prompts += scan.count(self.prompt) - self._tail.count(self.prompt)
                self._tail = scan[-len(self.prompt):]
            self._out = end
            if err:
                self.status.feed(err)
            self._err = err_end
            if data or err:
                self._cond.notify_all()

    # -- raw capture (the persistent shell tools read between their markers) ---------------
    def start_capture(self, max_bytes: int) -> None:
        """Record raw output from now on: the first and the last ``max_bytes / 2`` bytes."""
        with self._cond:
            self._capture = (bytearray(), bytearray(), max(1, max_bytes // 2))
            self._dropped = 0

    def _record(self, data: bytes) -> None:
        if self._capture is None:
            return
        head, tail, half = self._capture
        room = half - len(head)
        if room > 0:
            head += data[:room]
            data = data[room:]
        tail += data
        if len(tail) > half:
            self._dropped += len(tail) - half
            del tail[:len(tail) - half]

    def captured(self) -> tuple[bytes, bytes, int]:
        """(head, tail, bytes dropped between them) recorded since ``start_capture``."""
        with self._cond:
            if self._capture is None:
                return b"", b"", 0
            head, tail, _ = self._capture
            return bytes(head), bytes(tail), self._dropped

    # -- input ----------------------------------------------------------------------------
    def _write(self, payload: bytes) -> None:
        try:
            written = self.feed.write(payload, timeout=_WRITE_TIMEOUT_S)
        except FeedClosed:
            return  # the session ended; the settle says so
        if written < len(payload):
            raise SandboxUnavailable(
                "the terminal is not reading its input (the program in it does not read and the "
                "input buffer is full); interrupt it with terminal_signal or close it")

    def _send_frames(self, frames: list[bytes]) -> None:
        with self._cond:
            self._frames += len(frames)
            # Quiet is measured from the last send too: a signal or a line just
            # sent has not had time to make the program print anything.
            self._last_output = time.monotonic()
        self._write(b"".join(frames))

    def send(self, request: TerminalSendRequest, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        with self._cond:
            prompts = self._prompts
        frames: list[bytes] = []
        if request.signal is not None:
            frames.append(signal_frame(ALLOWED_SIGNALS[request.signal]))
        text = request.text.encode("utf-8") + (b"\r" if request.submit else b"")
        if text:
            frames.append(data_frames(text))
        if frames:
            self._send_frames(frames)
        return self._settle(settle_ms / 1000, idle_ms / 1000, prompts)

    def read(self, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        with self._cond:
            prompts = self._prompts
        return self._settle(settle_ms / 1000, idle_ms / 1000, prompts if settle_ms else -1)

    def signal(self, name: str) -> None:
        self._send_frames([signal_frame(ALLOWED_SIGNALS[name])])

    def resize(self, rows: int, cols: int) -> None:
        with self._cond:
            self.screen.resize(rows, cols)
        self._send_frames([resize_frame(rows, cols)])

    @property
    def prompts(self) -> int:
        """How many of our prompts the shell has printed so far."""
        with self._cond:
            return self._prompts

    @property
    def shell_foreground(self) -> bool:
        with self._cond:
            return self.status.state.shell_foreground

    # -- settling -------------------------------------------------------------------------
    def _reason(self, prompts: int, idle_s: float) -> WaitReason | None:
        if self.execution.done and not self._reader.is_alive():
            return "session_exit"
        state = self.status.state
        if state.frames >= self._frames and state.out_bytes == self._out and state.reading:
            return "stdin_read"
        if prompts >= 0 and self._prompts > prompts and state.frames >= self._frames:
            return "stdin_read"  # our prompt came back
        if time.monotonic() - self._last_output >= idle_s and state.frames >= self._frames:
            return "inferred_idle"
        return None

    def _settle(self, settle_s: float, idle_s: float, prompts: int) -> TerminalSnapshot:
        end = time.monotonic() + settle_s
        with self._cond:
            while True:
                reason = self._reason(prompts, idle_s)
                if reason is None and time.monotonic() >= end:
                    reason = "timeout"
                if reason is not None:
                    return self._snapshot(reason)
                self._cond.wait(min(_POLL_S * 5, max(0.0, end - time.monotonic())))

    def _snapshot(self, reason: WaitReason) -> TerminalSnapshot:
        ex = self.execution
        exit_code = sig = None
        if reason == "session_exit":
            relay_exit = self.status.exit
            if relay_exit is not None:
                exit_code = relay_exit.exit_code
                sig = signal_name(relay_exit.signal) if relay_exit.signal else None
            else:
                exit_code, sig = ex.exit_code, ex.signal
        return TerminalSnapshot(
            viewport=self.screen.viewport(),
            cursor=self.screen.cursor,
            wait_reason=reason,
            exit_code=exit_code,
            signal=sig,
            scrollback_lines=self.screen.scrollback_lines,
            output_lost=self._lost,
        )

    def scrollback(self, max_lines: int) -> tuple[str, ...]:
        with self._cond:
            return self.screen.scrollback(max_lines)

    @property
    def alive(self) -> bool:
        return not self.execution.done

    def close(self, wait_s: float) -> bool:
        try:
            self.feed.write(eof_frame(), timeout=0.1)
        except FeedClosed:
            pass
        self.feed.close()  # the relay hangs up and kills what the session started
        if not self.execution.wait(min(wait_s, 5.0)):
            self.execution.kill()
        gone = self.execution.wait(wait_s)
        self._stop.set()
        self._reader.join(wait_s)
        return gone


class TerminalBashBackend(Service, TerminalBackend):
    """Provider ``terminal-bash``: registers itself with ``ctx.require(TerminalRegistry)``."""

    key: ClassVar[str] = "terminal-bash"
    name: ClassVar[str] = "terminal-bash"
    Config: ClassVar[type[Any]] = TerminalBashConfig
    requires: ClassVar[tuple[type[Service], ...]] = (TerminalRegistry, ShellExecutor)
    config: TerminalBashConfig

    def __init__(self, ctx: Context, config: TerminalBashConfig | None = None) -> None:
        super().__init__(ctx, config)
        ctx.require(TerminalRegistry).register_backend(self)

    def open(self, request: TerminalOpenRequest) -> BashTerminalSession:
        shell = self.ctx.require(ShellExecutor)
        screen = TerminalScreen(request.rows, request.cols, self.config.scrollback)
        nonce = secrets.token_hex(8)
        if request.dialect == "pwsh":
            argv, env = pwsh_argv(nonce), {"TERM": "xterm"}
        else:
            argv, env = bash_argv(), bash_env(nonce)
        feed = StdinFeed(self.config.max_pending_input)
        spec = shell.resolve(ShellExecRequest(
            command="", argv=argv, workdir=request.workdir, on_expiry="none", stdin=feed, env=env,
            terminal=TerminalSize(request.rows, request.cols), sandbox_mode=request.sandbox_mode,
            stdout_max_bytes=self.config.max_output_bytes,
        ))
        execution = shell.execute(spec)
        facts = execution.sandbox if execution.done else None
        if facts is not None and facts.runner_failed:
            why = (facts.runner_error or "the sandbox runner failed; nothing ran").removeprefix(
                f"{SandboxUnavailable.code}: ")
            raise SandboxUnavailable(why)
        session = BashTerminalSession(execution, feed, screen, nonce)
        # Sends start at a prompt: typed-ahead input would be echoed before it,
        # and the first prompt would be taken for the command's end.
        session.initial = session.read(settle_ms=self.config.start_ms, idle_ms=self.config.start_ms)
        return session

    def close(self) -> None:
        registry = self.ctx.get(TerminalRegistry)
        if registry is not None:
            registry.unregister_backend(self)
