"""How ``dsh-sandbox run`` shows a running command: live streams, the exit
status it mirrors, ``--json``, and the one-line notes (timeout, denial hint)."""

from __future__ import annotations

import codecs
import dataclasses
import os
import signal as signal_mod
import sys
from typing import IO, Any

import click
from dsh.cli.signals import Stopped
from dsh.sandbox.errors import STARTED_AND_KILLED, DshError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.modes import SandboxMode

POLL_S = 0.02
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + 13  # as if killed by SIGPIPE
#: The sandbox or its runner failed, so the command did not run (or did not
#: start): distinct from any status of the command itself, as ``docker run``
#: and ``env`` use it.  126/127 (not executable / not found) are the command's.
EXIT_RUNNER_FAILED = 125


#: Resets the terminal's text attributes: the command's output may end in an
#: escape sequence (conceal, black on black...) that would hide our notes.
SGR_RESET = "\033[0m"


def note(text: str) -> None:
    """One line of ours on stderr.  Paths and names in it come from the
    command (a denied path, a directory it created): escaped always, on a
    pipe too, so a note never carries an escape sequence of the command's."""
    from dsh.sandbox.terminal_text import printable

    reset = SGR_RESET if is_terminal(sys.stderr) else ""
    click.echo(f"{reset}dsh-sandbox: {printable(text)}", err=True, color=bool(reset))


def is_terminal(stream: Any) -> bool:
    """Is ``stream`` (a text or byte stream, or ``None``) a terminal?"""
    try:
        return bool(stream is not None and stream.isatty())
    except (OSError, ValueError):
        return False


class OutputFailed(DshError):
    """Our own stdout or stderr cannot take the command's output (a full
    disk, ``> /dev/full``, an I/O error): the command is stopped."""

    code = "OUTPUT_FAILED"


def output_failed(stream: str, exc: OSError) -> OutputFailed:
    """The error for a failed write to our ``stream``; the stream is pointed
    at /dev/null so the interpreter's own flush at exit stays quiet."""
    target = sys.stdout if stream == "stdout" else sys.stderr
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, target.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return OutputFailed(
        f"cannot write the command's output to {stream} ({exc.strerror or exc}); the command is stopped: "
        f"point {stream} at a file or pipe that can take it"
    )


def closed_stream() -> str | None:
    """Which of our stdout and stderr is closed (``>&-``), if one is."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            if stream is None or stream.fileno() < 0:
                return name
        except (OSError, ValueError, AttributeError):
            return name
    return None


class LiveStreams:
    """Copies an execution's output to our stdout/stderr as it arrives.

    The observer holds only the tail of each stream.  When the command writes
    faster than we copy and the tail moves past what we have shown, the gap is
    read back from the stream's spill file (which holds the stream from its
    first byte, up to the spill cap) through the fd the host wrote it with, so
    the output stays complete and in order; only bytes beyond the spill cap
    can be lost, and that is reported.

    On a terminal (unless ``raw``), what the command prints cannot act on it:
    escape sequences other than colours (SGR) and control characters other
    than newline, tab, CR and backspace are shown, not obeyed (no clipboard
    write, title change, status report typed into our input, hidden text).
    """

    def __init__(self, execution: Any, *, raw: bool = False, colours: bool = True) -> None:
        self.execution = execution
        self.observed = execution.observed
        self.offsets = {"stdout": 0, "stderr": 0}
        self.lost = {"stdout": 0, "stderr": 0}
        self.sinks: dict[str, IO[bytes]] = {
            "stdout": sys.stdout.buffer,
            "stderr": sys.stderr.buffer,
        }
        self.filters: dict[str, Visible] = {
            stream: Visible(colours=colours) for stream, sink in self.sinks.items() if not raw and is_terminal(sink)
        }

    def finish(self) -> None:
        """Show what a filter still holds (an unfinished sequence at the end)."""
        for stream, visible in self.filters.items():
            rest = visible.flush()
            if rest:
                self.sinks[stream].write(rest)
                self.sinks[stream].flush()

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
        data = self.observed.read_spilled(stream, begin, upto - begin)
        if data:
            self._write(stream, data)
        self.lost[stream] += upto - begin - len(data)
        return len(data)

    def _write(self, stream: str, data: bytes) -> None:
        shown = self.filters[stream](data) if stream in self.filters else data
        try:
            self.sinks[stream].write(shown)
            self.sinks[stream].flush()
        except BrokenPipeError:
            raise  # our reader went away: ``follow`` stops the command as SIGPIPE would
        except OSError as exc:
            raise output_failed(stream, exc) from None


#: A colour/attribute sequence (SGR): harmless to show as it is.
_SGR = LazyPattern(r"\x1b\[[0-9;:]*m")
#: The start of one that a later read may complete (held back, up to a size).
_SGR_PREFIX = LazyPattern(r"\x1b(\[[0-9;:]*)?\Z")
_SGR_MAX = 64


class Visible:
    """Output bytes -> the same text with escape sequences and control
    characters made visible (``\\x1b[2J``); newlines and tabs kept (and, for
    ``colours``, CR, backspace and SGR colour sequences).  UTF-8 is decoded
    incrementally so a character split across reads survives."""

    def __init__(self, *, colours: bool = False) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._colours = colours
        self._held = ""  # an unfinished SGR sequence at the end of the last read

    def __call__(self, data: bytes) -> bytes:
        from dsh.sandbox.terminal_text import printable

        text = self._held + self._decoder.decode(data)
        self._held = ""
        if not self._colours:
            return printable(text, keep="\n\t").encode("utf-8")
        tail = _SGR_PREFIX.search(text)
        if tail is not None and len(text) - tail.start() <= _SGR_MAX:  # longer: no colour, shown
            self._held, text = text[tail.start() :], text[: tail.start()]
        out: list[str] = []
        last = 0
        for match in _SGR.finditer(text):
            out.append(printable(text[last : match.start()], keep="\n\t\r\b"))
            out.append(match.group())
            last = match.end()
        out.append(printable(text[last:], keep="\n\t\r\b"))
        return "".join(out).encode("utf-8")

    def flush(self) -> bytes:
        from dsh.sandbox.terminal_text import printable

        held, self._held = self._held + self._decoder.decode(b"", final=True), ""
        return printable(held, keep="\n\t").encode("utf-8")


def exit_status(result: Any) -> int:
    """The CLI's exit status for a ``ShellRunResult``."""
    from dsh.executors.signal_names import signal_number

    if result.timed_out:
        return EXIT_TIMEOUT
    if result.aborted:
        return EXIT_INTERRUPTED
    if result.signal is not None:
        number = signal_number(result.signal)
        return 128 + (number if number is not None else int(signal_mod.SIGKILL))
    if did_not_start(result):
        return EXIT_RUNNER_FAILED  # not a status of the command
    return int(result.exit_code)


def did_not_start(result: Any) -> bool:
    """The runner failed: no status of the command exists (a command may exit 125 itself)."""
    if result.timed_out or result.aborted or result.signal is not None:
        return False
    return result.exit_code is None or (result.sandbox is not None and bool(result.sandbox.runner_failed))


def result_json(result: Any) -> str:
    def default(value: object) -> object:
        if isinstance(value, SandboxMode):
            return value.value
        return str(value)

    import json  # only for --json

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
        report_left(execution)
        return EXIT_INTERRUPTED
    except Stopped:
        # SIGTERM/SIGHUP/SIGINT to us: the command goes first, then the
        # caller's teardown stops the container or the E2B sandbox.
        execution.kill()
        execution.wait(None)
        report_left(execution)
        raise
    except BrokenPipeError:
        # Our reader went away (``| head``): stop the command as SIGPIPE would.
        execution.kill()
        execution.wait(None)
        report_left(execution)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


#: What a failed allocation prints under RLIMIT_AS (Python, C, Node, Go).
_ALLOCATION_FAILED = LazyPattern(
    r"\bMemoryError\b|Cannot allocate memory|std::bad_alloc|JavaScript heap out of memory"
    r"|fatal error: runtime: out of memory|out of memory allocating"
)


def _size(value: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift and value % (1 << shift) == 0:
            return f"{value >> shift} {unit}"
    return f"{value} bytes"


def memory_note(result: Any, limit: int | None) -> str | None:
    """One line when a run under a memory limit ended as reaching it does: a
    SIGKILL we did not send (the cgroup's OOM kill; bwrap reports it as 137)
    or a failed allocation (RLIMIT_AS).  It names the limit and its value."""
    if limit is None or result.timed_out or result.aborted:
        return None
    killed = result.signal == "SIGKILL" or result.exit_code == 128 + int(signal_mod.SIGKILL)
    text = (result.stderr.text or "") + (result.stdout.text or "")
    failed = result.exit_code not in (None, 0) and _ALLOCATION_FAILED.search(text[-65536:]) is not None
    if not killed and not failed:
        return None
    how = "was killed (SIGKILL)" if killed else "could not allocate memory"
    return (
        f"the command {how} under the memory limit of {_size(limit)} (max_memory in the profile): "
        "reaching it ends the command this way; raise max_memory if the work needs more"
    )


def report_left(execution: Any) -> None:
    """What a command stopped before its end left that the host will trust
    (a repository it made, a hook it wrote): said as after any run, since a
    command that hangs until it is interrupted is the one to look at."""
    facts = execution.result().sandbox
    if facts is not None:
        report_trusted(facts)


def report_trusted(facts: Any) -> None:
    """The trusted files a run created or changed, the links removed from its
    git dirs, and where nothing could be searched: one note each."""
    if facts.trusted_changed or facts.removed_from_git or facts.trusted_unsearched:
        from dsh.tools.render import left_behind_notes

        for line in left_behind_notes(facts.trusted_changed, facts.removed_from_git, facts.trusted_unsearched,
                                      shown=20):
            note(line)


def report(result: Any, spec: Any) -> None:
    """One-line notes on stderr: timeout, and the denial hint."""
    if result.timed_out:
        note(f"timed out after {result.timeout_ms}ms; the command was killed")
    facts = result.sandbox
    if did_not_start(result):
        why = facts.runner_error if facts is not None and facts.runner_error else "see the error above"
        if STARTED_AND_KILLED in (result.stderr.text or ""):
            note(f"RUNNER_FAILED: the command was killed as it started ({why})")
        else:
            note(f"RUNNER_FAILED: the command did not start ({why})")
    if facts is not None and facts.network_denied:
        from dsh.tools.render import network_refused_note

        allowlist = spec.sandbox_policy.network_allowlist if spec.sandbox_policy is not None else None
        note(network_refused_note(facts.network_denied, shown=20,
                                  with_secrets=allowlist is not None and bool(allowlist.secrets)))
    if facts is not None:
        report_trusted(facts)
    if facts is None or spec.sandbox_policy is None:
        return
    memory = memory_note(result, spec.sandbox_policy.limits.max_memory_bytes)
    if memory is not None:
        note(memory)
    if facts.denied:
        from dsh.executors.denial import find_denial, hint

        denial = find_denial(
            spec.sandbox_policy,
            exit_code=result.exit_code,
            outputs=(result.stderr.text, result.stdout.text),
            workdir=spec.workdir,
        )
        line = hint(denial, facts.mode) if denial is not None else f"the command was denied under {facts.mode}"
        # A write into a read-only .git: the profile key that allows it, on the same line.
        note(f"{line} ({facts.refusal_note})" if facts.refusal_note else line)
    elif facts.refusal_note:
        note(facts.refusal_note)
