"""How ``dsh-sandbox run`` shows a running command: live streams, the exit
status it mirrors, ``--json``, and the one-line notes (timeout, denial hint)."""

from __future__ import annotations

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
    """Copies an execution's output to our stdout/stderr as it arrives."""

    def __init__(self, execution: Any) -> None:
        self.observed = execution.observed
        self.offsets = {"stdout": 0, "stderr": 0}
        self.lost = {"stdout": 0, "stderr": 0}
        self.sinks: dict[str, IO[bytes]] = {
            "stdout": sys.stdout.buffer,
            "stderr": sys.stderr.buffer,
        }

    def pump(self) -> int:
        """Copy what is new; returns how many bytes were copied."""
        moved = 0
        for stream, sink in self.sinks.items():
            data, end = self.observed.read(stream, self.offsets[stream])
            start = end - len(data)
            if start > self.offsets[stream]:  # the retained window moved past us
                self.lost[stream] += start - self.offsets[stream]
            if data:
                sink.write(data)
                sink.flush()
                moved += len(data)
            self.offsets[stream] = end
        return moved


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
