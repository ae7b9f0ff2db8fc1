"""``job_output`` and ``job_kill``: the model's handle on its background jobs.

Both go through ``ctx.require(JobRegistry)`` with the caller's owner, so one agent can never
read or stop another agent's job.
"""

from __future__ import annotations

from typing import Any

from dsh.executors.seam import MAX_TIMEOUT_MS
from dsh.sandbox.context import Context
from dsh.tools.base import Tool, ToolResult
from dsh.tools.jobs import JobRegistry
from dsh.tools.render import render_job_read
from dsh.tools.spec import ToolSpec, object_schema

_JOB_ID = {"type": "string", "minLength": 1, "description": "The job id, e.g. job-3."}


def _jobs(ctx: Context) -> JobRegistry:
    return ctx.require(JobRegistry)


class JobOutputTool(Tool):
    name = "job_output"

    def available(self, ctx: Context) -> bool:
        return ctx.has(JobRegistry)

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(
            self.name,
            "Read a background job's new output since the last read (each byte is returned "
            "once) and its status: `[job <id> running]`, or `[job <id> completed]` / "
            "`[job <id> killed]` with the same exit markers as the shell tools. If output was "
            "produced faster than it was read, the result says `[output truncated; full output: "
            "<path>]`: the full stream is in that file. `wait_ms` waits up to that long for the "
            "job to finish first (use it instead of polling in a loop).",
            object_schema(
                {
                    "job_id": _JOB_ID,
                    "wait_ms": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_TIMEOUT_MS,
                        "description": "Wait up to this many milliseconds for the job to finish.",
                    },
                },
                ["job_id"],
            ),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        jobs = _jobs(ctx)
        job = jobs.get(args["job_id"], owner)
        wait_ms: int = args.get("wait_ms", 0)
        if wait_ms:
            job.execution.wait(wait_ms / 1000)
        _, read = jobs.read(job.id, owner)
        facts = job.execution.sandbox if read.status != "running" else None
        return ToolResult(render_job_read(job.id, read, facts=facts), job_id=job.id)


class JobKillTool(Tool):
    name = "job_kill"

    def available(self, ctx: Context) -> bool:
        return ctx.has(JobRegistry)

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(
            self.name,
            "Stop a background job: its whole process group (and sandbox) is killed, SIGTERM "
            "first, then SIGKILL. Returns the output not read yet and how the job ended.",
            object_schema({"job_id": _JOB_ID}, ["job_id"]),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        jobs = _jobs(ctx)
        report = jobs.kill(args["job_id"], owner)
        job = jobs.get(report.job_id, owner)
        _, read = jobs.read(job.id, owner)
        if not report.killed:
            note = "it had already finished"
        elif report.settled:
            note = "stopped by job_kill with its whole process group"
        else:
            note = "kill sent, but it has not exited yet; check again with job_output"
        text = render_job_read(job.id, read, facts=job.execution.sandbox, note=note)
        if report.settled:
            jobs.release(job)  # its final output was just returned
        return ToolResult(text, job_id=job.id)


JOB_OUTPUT_TOOL = JobOutputTool()
JOB_KILL_TOOL = JobKillTool()
