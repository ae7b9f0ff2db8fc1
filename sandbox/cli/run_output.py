"""How ``dsh-sandbox run`` shows a running command: live streams, the exit
status it mirrors, ``--json``, and the one-line notes (timeout, denial hint)."""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import signal as signal_mod
import sys
from typing import IO, Any

import click
from dsh.sandbox.modes import SandboxMode

POLL_S = 0.02
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE


def note(text: str) -> None:
    click.echo(f"dsh-sandbox: {text}", err=True)


class LiveStreams:
    """Copies an execution's output to our stdout/stderr as it arrives.

    The observer holds only the tail of each stream.  When the command writes
    faster than we copy and the tail moves past what we have shown, the gap is
    read back from the stream's spill file (which holds the stream from its
    first byte, up to the spill cap), so the output stays complete and in
    order; only bytes beyond the spill cap can be lost, and that is reported.
    """

    def __init__(self, execution: Any, *, visible_on_terminal: bool = False) -> None:
        self.execution = execution
        self.observed = execution.observed
        self.offsets = {"stdout": 0, "stderr": 0}
        self.lost = {"stdout": 0, "stderr": 0}
        self.sinks: dict[str, IO[bytes]] = {
            "stdout": sys.stdout.buffer,
            "stderr": sys.stderr.buffer,
        }
        self._spills: dict[str, str | None] | None = None
        # Before a person is asked to approve on this terminal, what the
        # command printed must not be able to act on it (hide text, move the
        # cursor, draw a fake prompt, leave an OSC string open).
        self.filters: dict[str, Visible] = {
            stream: Visible() for stream, sink in self.sinks.items()
            if visible_on_terminal and _is_terminal(sink)
        }

    def pump(self) -> int:
        """Copy what is new; returns how many bytes were copied."""
        moved = 0
        for stream in self.sinks:
            data, end = self.observed.read(stream, self.offsets[stream])
            start = end - len(data)
            if start > self.offsets[stream]:  # the retained window moved past us
                moved += self._catch_up(stream, start)
            if data:
                self._write(stream, data)
                moved += len(data)
            self.offsets[stream] = end
        return moved

    def _catch_up(self, stream: str, upto: int) -> int:
        """Copy ``[offset, upto)`` of ``stream`` from its spill file."""
        begin = self.offsets[stream]
        data = b""
        path = self._spill_path(stream)
        if path is not None:
            try:
                with open(path, "rb") as spill:
                    spill.seek(begin)
                    data = spill.read(upto - begin)
            except OSError:
                data = b""
        if data:
            self._write(stream, data)
        self.lost[stream] += upto - begin - len(data)
        return len(data)

    def _write(self, stream: str, data: bytes) -> None:
        shown = self.filters[stream](data) if stream in self.filters else data
        self.sinks[stream].write(shown)
        self.sinks[stream].flush()

    def _spill_path(self, stream: str) -> str | None:
        if self._spills is None:
            # The consuming reader names the spill files once it has lost
            # bytes itself, which it has by now (it has not read anything).
            read = self.execution.read_output()
            self._spills = {"stdout": read.stdout_spill, "stderr": read.stderr_spill}
        return self._spills.get(stream)


class Visible:
    """Output bytes -> the same text with escape sequences and control
    characters made visible (``\\x1b[2J``); newlines and tabs kept.  UTF-8 is
    decoded incrementally so a character split across reads survives."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def __call__(self, data: bytes) -> bytes:
        from dsh.sandbox.approval import printable

        return printable(self._decoder.decode(data), keep="\n\t").encode("utf-8")


def _is_terminal(sink: IO[bytes]) -> bool:
    try:
        return sink.isatty()
    except (OSError, ValueError):
        return False


def exit_status(result: Any) -> int:
    """The CLI's exit status for a ``ShellRunResult``."""
    from dsh.executors.render import signal_number

    if result.timed_out:
        return EXIT_TIMEOUT
    if result.aborted:
        return EXIT_INTERRUPTED
    if result.signal is not None:
        number = signal_number(result.signal)
        return 128 + (number if number is not None else int(signal_mod.SIGKILL))
    return int(result.exit_code or 0)


def result_json(result: Any) -> str:
    def default(value: object) -> object:
        if isinstance(value, SandboxMode):
            return value.value
        return str(value)

    return json.dumps(dataclasses.asdict(result), default=default, indent=2)


def follow(execution: Any, live: LiveStreams | None) -> int | None:
    """Stream until the command ends; an exit status if we had to stop it."""
    try:
        while True:
            moved = live.pump() if live is not None else 0
            # While output flows, copy without pausing so the retained window
            # does not run ahead of us; otherwise poll.
            if execution.wait(0 if moved else POLL_S):
                return None
    except KeyboardInterrupt:
        execution.kill()
        execution.wait(None)
        note("interrupted; the command was killed")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Our reader went away (``| head``): stop the command as SIGPIPE would.
        execution.kill()
        execution.wait(None)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def report(result: Any, spec: Any) -> None:
    """One-line notes on stderr: timeout, and the denial hint."""
    if result.timed_out:
        note(f"timed out after {result.timeout_ms}ms; the command was killed")
    facts = result.sandbox
    if facts is not None and facts.trusted_changed:
        from dsh.tools.render import trusted_changed_note

        note(trusted_changed_note(facts.trusted_changed, shown=20))
    if facts is None or not facts.denied or spec.sandbox_policy is None:
        return
    from dsh.executors.denial import find_denial, hint

    denial = find_denial(
        spec.sandbox_policy,
        exit_code=result.exit_code,
        outputs=(result.stderr.text, result.stdout.text),
        workdir=spec.workdir,
    )
    if denial is not None:
        note(hint(denial, facts.mode))
    else:
        note(f"the command was denied under {facts.mode}")
