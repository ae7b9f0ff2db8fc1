"""The ``bash`` and ``pwsh`` tools: one implementation, two shell dialects.

Every command runs with ``on_expiry='none'``, is registered in ``ctx.require(JobRegistry)`` the
moment it starts, and the tool waits for it a bounded time (``timeout_ms``).
A command that outlives the wait keeps running as the job it already is, and
the result says so with the id.  Without a job registry the executor's own
deadline kills it instead (``[timed out after Nms]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsh.executors import escalation as flow
from dsh.executors.seam import (
    DEFAULT_TIMEOUT_MS,
    MAX_TIMEOUT_MS,
    SandboxFacts,
    ShellExecRequest,
    ShellExecutor,
)
from dsh.sandbox.context import Context
from dsh.sandbox.modes import SandboxMode
from dsh.tools.base import Tool, ToolResult
from dsh.tools.escalation import Escalation, EscalationRejected, granted, requested_mode
from dsh.tools.jobs import JobError, JobRegistry
from dsh.tools.render import render_job_read, render_result, render_started, render_still_running
from dsh.tools.spec import ToolSpec, object_schema

_MODE_LIMITS = {
    SandboxMode.READ_ONLY: "commands may read files but write none (only /dev/null); network is off",
    SandboxMode.WORKSPACE_WRITE: (
        "commands may write inside the workspace and the temp directories only; .git and .dsh "
        "stay read-only; network is off unless the profile allows it"
    ),
}


@dataclass(frozen=True)
class Dialect:
    """What differs between the bash and pwsh tools: words, not behaviour."""

    tool: str  # tool name, and the shell_kind of the ShellExecutor it needs
    title: str  # "bash", "PowerShell"
    launch: str  # how each call's process is started
    no_cd: str  # the advice about changing directory


BASH = Dialect("bash", "bash", "a fresh `bash -c` process", "do not `cd`")
PWSH = Dialect(
    "pwsh",
    "PowerShell",
    "a fresh `pwsh -NoProfile -NonInteractive -Command` process",
    "do not `Set-Location`/`cd`",
)


def timeout_bounds(shell: ShellExecutor) -> tuple[int, int]:
    """(default, max) timeout of the mounted executor (its config, else the seam's)."""
    config = shell.config
    default = getattr(config, "timeout_ms", DEFAULT_TIMEOUT_MS)
    cap = getattr(config, "max_timeout_ms", MAX_TIMEOUT_MS)
    return (default, cap) if isinstance(default, int) and isinstance(cap, int) else (
        DEFAULT_TIMEOUT_MS,
        MAX_TIMEOUT_MS,
    )


class ShellTool(Tool):
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.name = dialect.tool

    # -- what the model is told -------------------------------------------------------
    def shell(self, ctx: Context) -> ShellExecutor | None:
        shell = ctx.get(ShellExecutor)
        if shell is not None and shell.shell_kind == self.dialect.tool:
            return shell
        return None

    def available(self, ctx: Context) -> bool:
        return self.shell(ctx) is not None

    def description(self, shell: ShellExecutor, jobs: bool) -> str:
        d = self.dialect
        default, cap = timeout_bounds(shell)
        lines = [
            f"Run a {d.title} command and return its output (stdout and stderr together, in the order "
            "they were written).",
            "",
            f"- Every call runs in {d.launch}: the working directory, variables and functions "
            f"do not carry over between calls. Pass `workdir` instead; {d.no_cd}.",
            "- A non-zero exit ends the result with `[exit code: N]`, a signal with "
            "`[killed by signal: X]`; a normal exit (0) adds no marker.",
            "- Long output keeps its tail and ends with `[output truncated; full output: <path>]`; "
            "read that file (e.g. with grep or tail) when you need the rest.",
        ]
        if jobs:
            lines += [
                f"- `timeout_ms` (default {default}, at most {cap}) bounds how long this call "
                "waits. A command still running then keeps running as a background job; the "
                "result ends with `[job <id> running: ...]`. Read its new output with "
                "`job_output`, stop it with `job_kill`.",
                "- `run_in_background: true` returns a job id at once (servers, watchers, long "
                "builds); poll it with `job_output`.",
            ]
        else:
            lines.append(
                f"- `timeout_ms` (default {default}, at most {cap}): a command still running then "
                "is killed and the result says `[timed out after Nms]`."
            )
        mode = shell.sandbox_mode
        if mode is not None and shell.constraining:
            wider = ", ".join(m.value for m in SandboxMode if m.is_more_permissive_than(mode))
            lines += [
                f"- Commands run in a sandbox in {mode.value} mode: {_MODE_LIMITS[mode]}. A "
                f"blocked file access ends with `[sandbox: file access denied under {mode.value} "
                "mode]`. Other `[sandbox: ...]` lines (the network is off, a socket or IPC the sandbox "
                "refuses, a refused read) say what was refused; a wider mode is not the fix for them.",
                "- If the task truly needs more access, call again with the same `command`, "
                f"`sandbox_permissions` set to a more permissive mode ({wider}) and a "
                "`justification`. A person or a policy must approve it; if approved, only that "
                "exact command runs, once, with that access. Do not ask to work around a denial "
                "you can avoid (e.g. write inside the workspace instead).",
            ]
        return "\n".join(lines)

    def spec(self, ctx: Context) -> ToolSpec:
        shell = self.shell(ctx)
        if shell is None:
            raise LookupError(f"the {self.name} tool needs a {self.name} executor mounted (ShellExecutor)")
        jobs = ctx.has(JobRegistry)
        _, cap = timeout_bounds(shell)
        props: dict[str, dict[str, Any]] = {
            "command": {"type": "string", "minLength": 1, "description": "The command to run."},
            "description": {
                "type": "string",
                "description": "What the command does, in 5-10 words (shown to the user).",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": cap,
                "description": "How long to wait for the command, in milliseconds.",
            },
            "workdir": {
                "type": "string",
                "minLength": 1,
                "description": "Directory to run in (absolute, or relative to the workspace).",
            },
        }
        if jobs:
            props["run_in_background"] = {
                "type": "boolean",
                "description": "Start the command as a background job and return its id at once.",
            }
        if shell.constraining:
            props["sandbox_permissions"] = {
                "type": "string",
                "enum": [m.value for m in SandboxMode],
                "description": "Ask to run this exact command once under a more permissive "
                "sandbox mode (needs approval and a justification).",
            }
            props["justification"] = {
                "type": "string",
                "description": "Why this command needs the more permissive mode.",
            }
        return ToolSpec(self.name, self.description(shell, jobs), object_schema(props, ["command", "description"]))

    # -- a call ---------------------------------------------------------------------------
    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        shell = self.shell(ctx)
        if shell is None:
            return ToolResult.error(f"the {self.name} tool is not available here (no {self.name} executor).")
        jobs = ctx.get(JobRegistry)
        background = bool(args.get("run_in_background", False))
        if background and jobs is None:
            return ToolResult.error("run_in_background needs a job registry (JobRegistry); none is mounted.")
        try:
            mode = requested_mode(shell, args)
        except EscalationRejected as exc:
            return ToolResult.error(exc.message)
        if jobs is not None:
            jobs.check_capacity()  # refuse before anything is spawned
        command: str = args["command"]
        spec = shell.resolve(
            ShellExecRequest(
                command=command,
                workdir=args.get("workdir"),
                timeout_ms=args.get("timeout_ms"),
                on_expiry="kill" if jobs is None else "none",
                sandbox_mode=mode,
                merge_output=True,
            )
        )
        escalation: Escalation | None = None
        if mode is not None:
            try:
                escalation = granted(flow.ask(
                    ctx, shell, mode=mode, command=command, workdir=spec.workdir,
                    justification=str(args.get("justification", "")), tool=self.name, owner=owner,
                ))
            except EscalationRejected as exc:
                return ToolResult.error(exc.message)
        marker = escalation.marker if escalation else None
        # A model may ask to repeat a denied command wider: what the denied
        # run changed is then shown to the approver (a rules file approves
        # nothing).  Watched only where someone other than deny-all decides.
        before = flow.watch(flow.approver(ctx), spec) if escalation is None else None
        execution = shell.execute(spec)
        if jobs is None:
            result = execution.result()
            flow.remember(ctx, spec, result, before, owner=owner)
            return ToolResult(render_result(result, escalation=marker))
        try:
            job = jobs.register(execution, owner, command)
        except JobError:
            execution.kill()  # lost a race for the last slot: it must not run unowned
            raise
        # With on_expiry='none' the executor settles a runner failure instead of
        # raising; the call still failed closed, and the model is told so.
        failed = _runner_failure(execution.sandbox) if execution.done else None
        if failed is not None:
            jobs.release(job)
            return ToolResult.error(failed)
        if background:
            flow.remember(ctx, spec, None, before, owner=owner)
            return ToolResult(render_started(job.id), job_id=job.id)
        if execution.wait(spec.timeout_ms / 1000):
            result = execution.result()
            flow.remember(ctx, spec, result, before, owner=owner)
            jobs.release(job)
            failed = _runner_failure(result.sandbox)
            if failed is not None:
                return ToolResult.error(failed)
            return ToolResult(render_result(result, escalation=marker))
        flow.remember(ctx, spec, None, before, owner=owner)
        read = execution.read_output()
        if read.status == "running":
            return ToolResult(render_still_running(job.id, read, spec.timeout_ms), job_id=job.id)
        # It ended between the wait and the read; its id stays valid until reaped.
        return ToolResult(render_job_read(job.id, read, facts=execution.sandbox), job_id=job.id)


def _runner_failure(facts: SandboxFacts | None) -> str | None:
    if facts is None or not facts.runner_failed:
        return None
    why = facts.runner_error or "SANDBOX_UNAVAILABLE: the sandbox runner failed"
    return f"{why}. The command was not run."
