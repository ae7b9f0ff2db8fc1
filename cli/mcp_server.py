"""The MCP server behind ``dsh-sandbox mcp``: the session's tools on the SDK's low-level server.

Each ``tools/call`` goes through ``call_tool`` (the schema check, the tool, the
rendering and every failure as a result the model reads), exactly as ``tool
call`` does, so a client sees what ``tool call`` prints: the text as the
content and ``is_error`` as ``isError``.  The tools are synchronous and a
command may run for minutes, so each call runs on a worker thread, at most
``max_concurrent`` at once; the event loop keeps answering meanwhile.

Only this module imports the SDK (``mcp``, ``mcp_types``, ``anyio``).
"""

from __future__ import annotations

import functools
from typing import Any

from dsh.sandbox.context import Context


def _instructions(ctx: Context) -> str:
    from dsh.sandbox.policy_service import PolicyService

    service = ctx.get(PolicyService)
    where = ""
    if service is not None:
        where = f" Session mode: {service.default_mode.value}; workspace: {service.workspace}."
    return (
        "Commands run inside a sandbox (dsh-sandbox): writes outside the workspace, the network and "
        "other limits are enforced by the runner, and a denied action is reported in the output as a "
        "[sandbox: ...] marker. Jobs and terminals last as long as this connection." + where
    )


def serve_stdio(ctx: Context, *, owner: str, max_concurrent: int) -> None:
    """Serve ``ctx``'s tools over stdin/stdout until the client closes stdin."""
    import anyio

    anyio.run(functools.partial(_serve_stdio, ctx, owner=owner, max_concurrent=max_concurrent))


def build_server(ctx: Context, *, owner: str, max_concurrent: int) -> Any:
    """The SDK server with ``tools/list`` and ``tools/call`` over ``ctx``."""
    import anyio
    import anyio.to_thread
    import mcp_types as types
    from dsh.cli import __version__
    from dsh.tools.toolbox import call_tool, tool_specs
    from mcp.server import Server

    # The session's mounts are fixed, so its tool list is too.
    tools = [
        types.Tool(name=spec.name, description=spec.description, input_schema=spec.anthropic()["input_schema"])
        for spec in tool_specs(ctx)
    ]
    limiter = anyio.CapacityLimiter(max_concurrent)

    async def list_tools(_request: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call(_request: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments if params.arguments is not None else {}
        run = functools.partial(call_tool, ctx, params.name, arguments, owner=owner)
        # abandon_on_cancel: a call the client cancels, or the session ending,
        # does not wait for the command; closing the session kills it.
        result = await anyio.to_thread.run_sync(run, limiter=limiter, abandon_on_cancel=True)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            is_error=result.is_error,
        )

    return Server(
        "dsh-sandbox", version=__version__, instructions=_instructions(ctx),
        on_list_tools=list_tools, on_call_tool=call,
    )


async def _serve_stdio(ctx: Context, *, owner: str, max_concurrent: int) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(ctx, owner=owner, max_concurrent=max_concurrent)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
