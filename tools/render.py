"""What the model sees: the rendering contract of the shell tools.

Output first, then the trailer markers (see ``dsh.executors.render``):
``[timed out after Nms]``, then ``[killed by signal: X]`` or ``[exit code: N]``
(nothing for exit 0), job state, sandbox facts
(``[sandbox: file access denied under <mode> mode]`` for a write or a hidden
path a wider mode would allow; ``[sandbox: <what was refused>]`` for what it
would not: a connection under network-off, a runner's limitation, a read), and
``[output truncated; full output: <spill path>]`` for each cut stream (the
retained text is the tail).  ``parse_exit_status`` inverts every string built
here; the marker formats live in the seam so bash and pwsh never drift.
"""

from __future__ import annotations

from dsh.executors.render import (
    denied_marker,
    job_marker,
    join_rendered,
    sandbox_marker,
    status_marker,
    timeout_marker,
    truncated_marker,
)
from dsh.executors.seam import (
    CollectedOutput,
    SandboxFacts,
    ShellProcessRead,
    ShellRunResult,
)
from dsh.sandbox.modes import SandboxMode


def _one_line(text: str) -> str:
    """Markers are single lines: a note with a newline would end the trailer."""
    return " ".join(text.split())


def output_body(stdout: str, stderr: str) -> str:
    """stdout, then stderr on its own line (executors that merge leave stderr empty)."""
    if stdout and stderr and not stdout.endswith("\n"):
        return stdout + "\n" + stderr
    return stdout + stderr


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
    if facts.runner_failed:
        why = _one_line(facts.runner_error or "unknown error")
        lines.append(sandbox_marker(f"runner {facts.runner or ''} failed: {why}".replace("  ", " ")))
    if facts.trusted_changed:
        lines.append(sandbox_marker(trusted_changed_note(facts.trusted_changed)))
    if facts.trusted_unsearched:
        lines.append(sandbox_marker(trusted_unsearched_note(facts.trusted_unsearched)))
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
