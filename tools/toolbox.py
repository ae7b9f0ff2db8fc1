"""The tool set of a context, and the one way to call a tool.

``call_tool`` validates the arguments against the advertised schema, runs the
tool and turns every failure into a ``ToolResult`` the model can act on:
wrong arguments, rejected escalations, unknown or foreign jobs, an
unavailable sandbox.  The model never sees a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from dsh.sandbox.context import Context
from dsh.sandbox.errors import DshError, SandboxUnavailable
from dsh.tools.base import Tool, ToolResult
from dsh.tools.bash import BASH_TOOL
from dsh.tools.job_tools import JOB_KILL_TOOL, JOB_OUTPUT_TOOL
from dsh.tools.persistent_shell import PERSISTENT_BASH_TOOL, PERSISTENT_PWSH_TOOL
from dsh.tools.pwsh import PWSH_TOOL
from dsh.tools.spec import ArgumentError, SpecFormat, ToolSpec, validate_args
from dsh.tools.terminal_tools import TERMINAL_TOOLS

log = logging.getLogger("dsh.tools")

#: A later tool of the same name wins when both are available (a mounted
#: ``persistent-shells`` turns ``bash`` into the persistent one).
ALL_TOOLS: tuple[Tool, ...] = (
    BASH_TOOL, PWSH_TOOL, JOB_OUTPUT_TOOL, JOB_KILL_TOOL, *TERMINAL_TOOLS, PERSISTENT_BASH_TOOL, PERSISTENT_PWSH_TOOL,
)


def available_tools(ctx: Context) -> list[Tool]:
    chosen: dict[str, Tool] = {}
    for tool in ALL_TOOLS:
        if tool.available(ctx):
            chosen[tool.name] = tool
    return list(chosen.values())


def tool_specs(ctx: Context) -> list[ToolSpec]:
    return [tool.spec(ctx) for tool in available_tools(ctx)]


def export_specs(ctx: Context, fmt: SpecFormat) -> list[dict[str, Any]]:
    return [spec.export(fmt) for spec in tool_specs(ctx)]


def call_tool(ctx: Context, name: str, args: Any, *, owner: str) -> ToolResult:
    """Run one tool call for ``owner`` and return exactly what the model sees."""
    tools = {tool.name: tool for tool in available_tools(ctx)}
    tool = tools.get(name)
    if tool is None:
        known = ", ".join(tools) or "none"
        return ToolResult.error(f"unknown tool {name!r}; the tools here are: {known}.")
    try:
        checked = validate_args(tool.spec(ctx), args)
        return tool.run(ctx, checked, owner)
    except ArgumentError as exc:
        return ToolResult.error(str(exc))
    except SandboxUnavailable as exc:
        return ToolResult.error(f"{exc}. The command was not run.")
    except DshError as exc:
        return ToolResult.error(f"{exc.code}: {exc}")
    except Exception as exc:  # a bug must still reach the model as a result
        log.exception("tool %s failed", name)
        return ToolResult.error(f"internal error in the {name} tool: {type(exc).__name__}: {exc}")


def release_owner(ctx: Context, owner: str) -> int:
    """``owner`` went away (an MCP client's session ended): kill its jobs and
    close its terminals (its persistent shells among them), and refuse it new
    terminals.  How many jobs and terminals were ended."""
    from dsh.executors.terminal_registry import TerminalRegistry
    from dsh.tools.jobs import JobRegistry

    ended = 0
    jobs = ctx.get(JobRegistry)
    if jobs is not None:
        for job in jobs.owned_by(owner):
            jobs.kill(job.id, owner, wait_s=5.0)
            ended += 1
    terminals = ctx.get(TerminalRegistry)
    if terminals is not None:
        ended += terminals.retire_owner(owner)
    return ended
