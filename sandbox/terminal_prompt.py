"""Asking a person at the terminal whether an escalation may run.

The request is shown escaped (``terminal_text``) after a reset of whatever
state the command's output left the terminal in; keys typed before the
question was on the screen are discarded, so only an answer to it counts.
"""

from __future__ import annotations

import os
import select
import threading
import time
from typing import IO

from dsh.sandbox.escalation_types import EscalationDecision, EscalationRequest
from dsh.sandbox.file_changes import FileChanges
from dsh.sandbox.terminal_text import TERMINAL_RESET, command_shown, printable

#: Changed files listed in the prompt (the count is always exact).
PROMPT_CHANGES_SHOWN = 20


def changes_shown(changes: FileChanges | None) -> str:
    """The prompt's lines on what a denied run changed: an approval re-runs the
    command on the files as the denied run left them."""
    if changes is None:
        return ""
    if changes.clean:
        return "  changed:       nothing under the writable roots since the denied run started\n"
    text = ""
    if changes.total:
        text += (
            f"  changed:       {changes.total} file(s) under the writable roots by the denied run "
            "(the re-run reads them as they are now):\n"
        )
        shown = changes.lines(PROMPT_CHANGES_SHOWN)
        text += "".join(f"    {kind:<9} {printable(path)}\n" for kind, path in shown)
        if changes.total > len(shown):
            text += f"    ... and {changes.total - len(shown)} more\n"
    for why in changes.incomplete:
        text += f"  NOT KNOWN:     what changed: {printable(why)}\n"
    return text


def _discard_typeahead(inp: IO[str]) -> None:
    """Drop input the terminal holds but nobody has read yet."""
    try:
        fd = inp.fileno()
        if not os.isatty(fd):
            return
        import termios

        termios.tcflush(fd, termios.TCIFLUSH)
    except (OSError, ValueError, AttributeError):
        pass  # not a terminal (an in-memory stream, a pipe): nothing is typed ahead


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False


class TerminalPrompter:
    """Asks yes-once / session / no on a terminal; default No; times out to No."""

    _serial = threading.Lock()  # one question on the terminal at a time

    def __init__(
        self,
        timeout_s: float,
        tty: str = "/dev/tty",
        input: IO[str] | None = None,
        output: IO[str] | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.tty = tty
        self.input = input
        self.output = output

    def ask(self, request: EscalationRequest, provider: str) -> EscalationDecision:
        with self._serial:
            if self.input is not None and self.output is not None:
                return self._ask(request, provider, self.input, self.output)
            # Two handles: a terminal is not seekable, so no "r+" buffered file.
            try:
                tty_in = open(self.tty, encoding="utf-8", errors="replace")
            except OSError as exc:
                return EscalationDecision.deny(
                    f"no terminal to ask a person ({self.tty}: {exc.strerror or exc})", provider
                )
            with tty_in:
                try:
                    tty_out = open(self.tty, "w", encoding="utf-8", errors="replace")
                except OSError as exc:
                    return EscalationDecision.deny(
                        f"cannot write to the terminal ({self.tty}: {exc.strerror or exc})",
                        provider,
                    )
                with tty_out:
                    return self._ask(
                        request, provider, self.input or tty_in, self.output or tty_out
                    )

    def _ask(
        self, request: EscalationRequest, provider: str, inp: IO[str], out: IO[str]
    ) -> EscalationDecision:
        # What was typed before the question was on the screen is no answer to
        # it: a command can print its own "[y/N]" and never read the reply.
        _discard_typeahead(inp)
        if _is_terminal(out):
            out.write(TERMINAL_RESET)
        out.write(
            f"\ndsh-sandbox: escalation requested by {printable(request.owner)} "
            f"(tool {printable(request.tool)})\n"
            f"{command_shown(request.command)}"
            f"  workdir:       {printable(request.workdir)}\n"
            f"  mode:          {printable(request.current_mode.value)} -> "
            f"{printable(request.requested_mode.value)}\n"
            f"  justification: {printable(request.justification)}\n"
            f"{changes_shown(request.changes)}"
        )
        out.flush()
        # Again once the request is on the screen, before the question that
        # invites the answer: only keys pressed after it is shown count.
        _discard_typeahead(inp)
        out.write(
            f"Run it under {request.requested_mode.value}? [y] once, [s] this exact command for "
            f"the session, [N]o (default; no answer in {self.timeout_s:g}s denies): "
        )
        out.flush()
        answer = self._read_line(inp)
        if answer is None:
            out.write("\n(no answer: denied)\n")
            out.flush()
            return EscalationDecision.deny(f"no answer within {self.timeout_s:g}s", provider)
        word = answer.strip().lower()
        if word in ("y", "yes"):
            return EscalationDecision.approve_once("approved at the terminal", provider)
        if word in ("s", "session"):
            return EscalationDecision.approve_session("approved at the terminal", provider)
        return EscalationDecision.deny("denied at the terminal", provider)

    def _read_line(self, inp: IO[str]) -> str | None:
        """One line within the timeout; None on timeout or end of input."""
        try:
            fd = inp.fileno()
        except (OSError, ValueError, AttributeError):
            line = inp.readline()  # an in-memory stream cannot block
            return line if line else None
        deadline = time.monotonic() + self.timeout_s
        data = b""
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            # poll, not select: a long-lived process may hold more than
            # FD_SETSIZE descriptors, and select refuses any fd above it.
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(max(1, int(remaining * 1000))):
                return None
            chunk = os.read(fd, 1024)
            if not chunk:
                return data.decode("utf-8", "replace") if data else None
            data += chunk
        return data.split(b"\n", 1)[0].decode("utf-8", "replace")
