"""What the model sees: the rendering contract of the shell tools, owned here.

A rendered tool result is a *body* (the command's output: stdout, then stderr)
followed by a *trailer*: one marker per line, each wrapped in ``[...]``, in
this order:

    [timed out after Nms]
    [killed by signal: X]  or  [exit code: N]   (nothing for exit 0;
                                                 [not started] for neither)
    [job ID STATE: ...]                          (jobs only)
    [sandbox: ...]                               (denial, escalation, runner facts)
    [output truncated; full output: PATH]        (one per cut stream; the
                                                 retained text is the tail)

``[sandbox: file access denied under <mode> mode]`` is for a write or a hidden
path a wider mode would allow; ``[sandbox: <what was refused>]`` for what it
would not (a connection under network-off, a runner's limitation, a read).

``parse_exit_status`` reads only that trailer, from the end, so output that
contains marker-like text cannot fool it.  The one ambiguity left (a body whose
last line itself looks like a marker, or is empty) is removed by the renderer:
it then writes one blank *guard* line between body and trailer, and the parser
drops exactly one blank line where the trailer stops.  Hence, for every result,
``parse_exit_status(join_rendered(body, trailer))`` gives back the body (without
one trailing newline) and the exit status exactly.  The bash and pwsh tools
both render through here, so they never drift.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dsh.executors.seam import (
    CollectedOutput,
    SandboxFacts,
    ShellProcessRead,
    ShellRunResult,
)
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.modes import SandboxMode

JobState = Literal["running", "completed", "killed"]


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


#: Refused hosts named one marker each, up to this many.
NETWORK_SHOWN = 5


def network_denied_note(name: str, shared: bool = False) -> str:
    # A host as the command asked for it: anything beyond a host's characters is
    # quoted, so a name cannot close the marker early or imitate another one.
    plain = name and all(c.isascii() and (c.isalnum() or c in ".-_:*") for c in name)
    # Another command of the session ran meanwhile: the refusal may be its, and
    # must not read as this command's need (one command could nudge the
    # allowlist open for another).
    meanwhile = " (another command of this session ran meanwhile: it may have asked)" if shared else ""
    return f"network access to {name if plain else json.dumps(name)} denied{meanwhile}"


def network_refused_note(hosts: tuple[str, ...], shown: int = 20, *, with_secrets: bool = False) -> str:
    """One line naming the hosts the network allowlist refused (``run``'s stderr).

    With secrets in the allowlist an allowed host is refused too, for a
    request that carries a placeholder where its rule does not put the value:
    allowing the host is then not the fix, and the line says what is."""
    secrets = ("; a request that carries a secret's placeholder is refused unless it goes to a host of its "
               "[[network.secrets]] entry, in its header, over HTTPS") if with_secrets else ""
    return (f"the network allowlist refused {_first(hosts, shown)} (allow a host with --allow-domain HOST, "
            f"or [network] allow in the profile{secrets})")


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
_TRAILER_LINE = LazyPattern(r"\[[^\n]*\]")
_EXIT_RE = LazyPattern(r"\[exit code: (-?\d+)\]")
_SIGNAL_RE = LazyPattern(r"\[killed by signal: ([^\]\s]+)\]")
_TIMEOUT_RE = LazyPattern(r"\[timed out after (\d+)ms\]")
_JOB_RE = LazyPattern(r"\[job (\S+) (running|completed|killed)(?:: .*)?\]")
_DENIED_RE = LazyPattern(r"\[sandbox: file access denied under (\S+) mode\]")
_SPILL_RE = LazyPattern(r"\[output truncated; full output: (.+)\]")
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


# -- rendering ------------------------------------------------------------------
def _one_line(text: str) -> str:
    """Markers are single lines: a note with a newline would end the trailer."""
    return " ".join(text.split())


def output_body(stdout: str, stderr: str) -> str:
    """stdout, then stderr on its own line (executors that merge leave stderr empty)."""
    if stdout and stderr and not stdout.endswith("\n"):
        return stdout + "\n" + stderr
    return stdout + stderr


def left_behind_notes(changed: Sequence[str], removed: Sequence[str], unsearched: Sequence[str],
                      shown: int = 5) -> list[str]:
    """What a run left that the host will trust, one note each: the trusted
    files it created or changed, the links removed from its git dirs, and
    where nothing could be searched."""
    notes = [trusted_changed_note(tuple(changed), shown)] if changed else []
    notes += [removed_from_git_note(tuple(removed), shown)] if removed else []
    notes += [trusted_unsearched_note(tuple(unsearched), shown)] if unsearched else []
    return notes


def trusted_changed_note(paths: tuple[str, ...], shown: int = 5) -> str:
    """One line naming the files a later host action trusts that the run wrote."""
    return (
        f"the command created or changed {len(paths)} file(s) that git, your shell or your "
        f"tools run or trust: {_first(paths, shown)}; review them before running git or opening the project"
    )


def trusted_unsearched_note(paths: tuple[str, ...], shown: int = 5) -> str:
    """One line naming where those files could not be searched for."""
    return (
        f"the search for files that git, your shell or your tools run or trust was incomplete in "
        f"{_first(paths, shown)} (unreadable, too deep or too many entries): a repository or config there "
        "was not checked; review it before running git or opening the project"
    )


def removed_from_git_note(paths: tuple[str, ...], shown: int = 5) -> str:
    """One line naming the links and special files removed from git dirs."""
    return (
        f"removed {len(paths)} link(s) or special file(s) the command made inside a git directory, which "
        f"git would have written through to files outside the sandbox: {_first(paths, shown)}"
    )


def _first(paths: tuple[str, ...], shown: int) -> str:
    """The first ``shown`` paths on one line each, and how many more there are."""
    names = ", ".join(_one_line(p) for p in paths[:shown])
    return names + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def sandbox_lines(facts: SandboxFacts | None) -> list[str]:
    if facts is None:
        return []
    lines: list[str] = []
    if facts.denied:
        lines.append(denied_marker(facts.mode.value))
    if facts.refusal_note:
        # What no wider mode is the answer to (a connection under network-off, a
        # runner's limitation, a read): said as it is, never as a file denial.
        lines.append(sandbox_marker(_one_line(facts.refusal_note)))
    lines += [sandbox_marker(network_denied_note(name, facts.network_denied_shared))
              for name in facts.network_denied[:NETWORK_SHOWN]]
    if len(facts.network_denied) > NETWORK_SHOWN:
        lines.append(sandbox_marker(f"network access to {len(facts.network_denied) - NETWORK_SHOWN} more "
                                    "host(s) denied"))
    if facts.runner_failed:
        why = _one_line(facts.runner_error or "unknown error")
        lines.append(sandbox_marker(f"runner {facts.runner or ''} failed: {why}".replace("  ", " ")))
    if facts.trusted_changed:
        lines.append(sandbox_marker(trusted_changed_note(facts.trusted_changed)))
    if facts.trusted_unsearched:
        lines.append(sandbox_marker(trusted_unsearched_note(facts.trusted_unsearched)))
    if facts.removed_from_git:
        lines.append(sandbox_marker(removed_from_git_note(facts.removed_from_git)))
    return lines


def _truncation_lines(*streams: CollectedOutput) -> list[str]:
    return [
        truncated_marker(_one_line(s.spill_path) if s.spill_path else None, s.omitted_bytes)
        for s in streams
        if s.truncated
    ]


def escalation_line(mode: SandboxMode, scope: str) -> str:
    return sandbox_marker(f"ran under {mode.value} mode after approval ({scope})")


def render_result(
    result: ShellRunResult,
    *,
    escalation: str | None = None,
) -> str:
    """A finished foreground run.  ``escalation`` is a marker from ``escalation_line``."""
    trailer: list[str] = []
    if result.timed_out:
        trailer.append(timeout_marker(result.timeout_ms))
    if result.aborted:
        trailer.append("[aborted]")
    status = status_marker(result.exit_code, result.signal)
    if status:
        trailer.append(status)
    if escalation:
        trailer.append(escalation)
    trailer.extend(sandbox_lines(result.sandbox))
    trailer.extend(_truncation_lines(result.stdout, result.stderr))
    return join_rendered(output_body(result.stdout.text, result.stderr.text), trailer)


def _lossy_lines(read: ShellProcessRead) -> list[str]:
    if not read.lossy:
        return []
    spills = [p for p in (read.stdout_spill, read.stderr_spill) if p]
    if not spills:
        return [truncated_marker(None)]
    return [truncated_marker(_one_line(p)) for p in spills]


def render_job_read(
    job_id: str,
    read: ShellProcessRead,
    *,
    facts: SandboxFacts | None = None,
    note: str = "",
) -> str:
    """``job_output``: the new output since the last read, then the job's state."""
    trailer: list[str] = []
    if read.status != "running":
        status = status_marker(read.exit_code, read.signal)
        if status:
            trailer.append(status)
    trailer.append(job_marker(job_id, read.status, note))
    trailer.extend(sandbox_lines(facts))
    trailer.extend(_lossy_lines(read))
    return join_rendered(output_body(read.stdout, read.stderr), trailer)


def render_still_running(job_id: str, read: ShellProcessRead, waited_ms: int) -> str:
    """A foreground command that outlived the tool's wait: it keeps running as its job."""
    note = (
        f"still running after {waited_ms}ms and continues in the background; "
        f"job_output with job_id {job_id} reads its new output, job_kill stops it"
    )
    return render_job_read(job_id, read, note=note)


def render_started(job_id: str) -> str:
    """``run_in_background``: the job id, returned at once."""
    return job_marker(
        job_id,
        "running",
        f"started in the background; job_output with job_id {job_id} reads its output, "
        "job_kill stops it",
    )
