"""The shell seam's shared exit-status convention.

A rendered tool result is a *body* (the command's output) followed by a
*trailer*: one marker per line, each wrapped in ``[...]``, in this order:

    [timed out after Nms]
    [killed by signal: X]  or  [exit code: N]   (nothing for exit 0;
                                                 [not started] for neither)
    [job ID STATE: ...]                          (jobs only)
    [sandbox: ...]                               (denial, escalation, runner facts)
    [output truncated; full output: PATH]        (one per cut stream)

``parse_exit_status`` reads only that trailer, from the end, so output that
contains marker-like text cannot fool it.  The one ambiguity left (a body whose
last line itself looks like a marker, or is empty) is removed by the renderer:
it then writes one blank *guard* line between body and trailer, and the parser
drops exactly one blank line where the trailer stops.  Hence, for every result,
``parse_exit_status(join_rendered(body, trailer))`` gives back the body (without
one trailing newline) and the exit status exactly.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

JobState = Literal["running", "completed", "killed"]


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def signal_number(name: str) -> int | None:
    try:
        return int(_signal.Signals[name])
    except KeyError:
        m = re.fullmatch(r"SIG(\d+)", name)
        return int(m.group(1)) if m else None


# -- marker builders ------------------------------------------------------------
def exit_marker(exit_code: int | None, signal: str | None) -> str | None:
    """``[killed by signal: X]`` or ``[exit code: N]``; None for exit 0."""
    if signal is not None:
        return f"[killed by signal: {signal}]"
    if exit_code is not None and exit_code != 0:
        return f"[exit code: {exit_code}]"
    return None


#: A command that ended with neither an exit code nor a signal: it never started
#: (the deadline passed during preparation, or the spawn failed).
NOT_STARTED_MARKER = "[not started]"


def status_marker(exit_code: int | None, signal: str | None) -> str | None:
    """``exit_marker``, plus ``[not started]`` when there is neither status."""
    if exit_code is None and signal is None:
        return NOT_STARTED_MARKER
    return exit_marker(exit_code, signal)


def timeout_marker(timeout_ms: int) -> str:
    return f"[timed out after {timeout_ms}ms]"


def job_marker(job_id: str, state: JobState, note: str = "") -> str:
    return f"[job {job_id} {state}{': ' + note if note else ''}]"


def sandbox_marker(note: str) -> str:
    return f"[sandbox: {note}]"


def denied_marker(mode: str) -> str:
    return sandbox_marker(f"file access denied under {mode} mode")


def truncated_marker(spill_path: str | None, omitted_bytes: int = 0) -> str:
    if spill_path:
        return f"[output truncated; full output: {spill_path}]"
    return f"[output truncated; {omitted_bytes} bytes omitted, no full copy kept]"


# -- parsing ----------------------------------------------------------------------
@dataclass(frozen=True)
class ExitStatusMarker:
    """What ``parse_exit_status`` recovers from a rendered string.

    ``exit_code``/``signal``: exactly one is set once a command has ended (no
    exit marker means exit 0); both are None while ``job_state`` is running.
    """

    body: str
    exit_code: int | None
    signal: str | None
    timed_out_ms: int | None = None
    job_id: str | None = None
    job_state: JobState | None = None
    denied_mode: str | None = None
    spill_paths: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # every trailer line, in order

    @property
    def running(self) -> bool:
        return self.job_state == "running"


# A trailer line: the whole line is one bracketed marker.
_TRAILER_LINE = re.compile(r"\[[^\n]*\]")
_EXIT_RE = re.compile(r"\[exit code: (-?\d+)\]")
_SIGNAL_RE = re.compile(r"\[killed by signal: ([^\]\s]+)\]")
_TIMEOUT_RE = re.compile(r"\[timed out after (\d+)ms\]")
_JOB_RE = re.compile(r"\[job (\S+) (running|completed|killed)(?:: .*)?\]")
_DENIED_RE = re.compile(r"\[sandbox: file access denied under (\S+) mode\]")
_SPILL_RE = re.compile(r"\[output truncated; full output: (.+)\]")
_JOB_STATES: dict[str, JobState] = {"running": "running", "completed": "completed", "killed": "killed"}


def needs_guard(body: str) -> bool:
    """True when ``body``'s last line could be read as part of a trailer."""
    if not body:
        return False
    last = body.rsplit("\n", 1)[-1]
    return last == "" or _TRAILER_LINE.fullmatch(last) is not None


def join_rendered(body: str, trailer: Sequence[str]) -> str:
    """Body (one trailing newline dropped), guard line if needed, trailer lines."""
    body = body.removesuffix("\n")
    lines: list[str] = [body] if body else []
    if needs_guard(body):
        lines.append("")
    lines.extend(trailer)
    return "\n".join(lines)


def parse_exit_status(rendered: str) -> ExitStatusMarker:
    """Recover ``{exit_code}`` or ``{signal}`` (and the other markers) from a
    rendered tool result.  Only the trailer counts; no exit marker means exit 0.
    """
    lines = rendered.split("\n") if rendered else []
    cut = len(lines)
    while cut > 0 and _TRAILER_LINE.fullmatch(lines[cut - 1]):
        cut -= 1
    trailer = tuple(lines[cut:])
    body_lines = lines[:cut]
    if body_lines and body_lines[-1] == "":
        body_lines.pop()  # the renderer's guard line
    exit_code: int | None = 0
    signal: str | None = None
    timed_out: int | None = None
    job_id: str | None = None
    job_state: JobState | None = None
    denied: str | None = None
    spills: list[str] = []
    saw_status = False
    for line in trailer:
        if m := _EXIT_RE.fullmatch(line):
            exit_code, signal, saw_status = int(m.group(1)), None, True
        elif m := _SIGNAL_RE.fullmatch(line):
            exit_code, signal, saw_status = None, m.group(1), True
        elif line == NOT_STARTED_MARKER:
            exit_code, signal, saw_status = None, None, True
        elif m := _TIMEOUT_RE.fullmatch(line):
            timed_out = int(m.group(1))
        elif m := _JOB_RE.fullmatch(line):
            job_id = m.group(1)
            job_state = _JOB_STATES[m.group(2)]
        elif m := _DENIED_RE.fullmatch(line):
            denied = m.group(1)
        elif m := _SPILL_RE.fullmatch(line):
            spills.append(m.group(1))
    # A running job has no status yet; a job killed before it ever ran (a
    # failed spawn) has neither an exit code nor a signal.
    if job_state == "running" or (job_state == "killed" and not saw_status):
        exit_code, signal = None, None
    return ExitStatusMarker(
        body="\n".join(body_lines),
        exit_code=exit_code,
        signal=signal,
        timed_out_ms=timed_out,
        job_id=job_id,
        job_state=job_state,
        denied_mode=denied,
        spill_paths=tuple(spills),
        notes=trailer,
    )
