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

import contextvars
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
    from dsh.sandbox.approval import Approval
    from dsh.sandbox.approval_elicit import ElicitApproval

    approver = ctx.get(Approval)
    if isinstance(approver, ElicitApproval):
        approver.attach(_ask_client)

    async def list_tools(_request: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call(request: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments if params.arguments is not None else {}
        _CALLER.set((request.session, request.request_id))
        run = functools.partial(call_tool, ctx, params.name, arguments, owner=client_owner(owner, request))
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


def client_owner(owner: str, request: Any) -> str:
    """Who owns what a call starts: over stdio the one client of the process;
    over HTTP each MCP session (its ``mcp-session-id``), so that one client can
    neither read nor kill another's jobs and terminals, and a session's end
    ends only what it started."""
    http = getattr(request, "request", None)
    if http is None:
        return owner
    session = http.headers.get(SESSION_HEADER)
    # The transport refuses a call without a session; an empty owner of its
    # own keeps such a call away from every session's jobs all the same.
    return f"{owner}:{session or '-'}"


#: The header that names a client's MCP session over streamable HTTP.
SESSION_HEADER = "mcp-session-id"


#: The session and request id of the tool call a worker thread runs (copied
#: into the thread with the context), for the approval asker.
_CALLER: contextvars.ContextVar[tuple[Any, Any]] = contextvars.ContextVar("dsh_mcp_caller")

#: How long the client's user has to answer an approval question.
ELICIT_TIMEOUT_S = 300.0


def _ask_client(message: str) -> str:
    """Runs on the worker thread of a tool call: ask that call's client by
    elicitation and wait; "once", "session" or the reason for a denial."""
    import anyio
    import anyio.from_thread

    caller = _CALLER.get(None)
    if caller is None:
        return "no MCP request is asking; work within the current mode"
    session, request_id = caller
    capabilities = session.client_capabilities
    if capabilities is None or capabilities.elicitation is None or not session.can_send_request:
        return ("the MCP client cannot be asked (it does not support elicitation on this connection); "
                "work within the current mode, or start the server with --approval rules:FILE")
    schema = {"type": "object", "required": ["decision"], "properties": {"decision": {
        "type": "string", "enum": ["deny", "once", "session"], "title": "Decision",
        "description": "deny, approve once, or approve this exact command for the session"}}}

    async def ask() -> Any:
        with anyio.fail_after(ELICIT_TIMEOUT_S):
            return await session.elicit_form(message, schema, related_request_id=request_id)

    try:
        result = anyio.from_thread.run(ask)
    except TimeoutError:
        return f"the MCP client's user did not answer within {ELICIT_TIMEOUT_S:g} s"
    except Exception as exc:  # a broken channel denies; it never approves
        return f"asking the MCP client failed: {type(exc).__name__}: {exc}"
    content = result.content or {}
    if result.action == "accept" and content.get("decision") in ("once", "session"):
        return str(content["decision"])
    return f"denied by the MCP client's user ({result.action})"


async def _serve_stdio(ctx: Context, *, owner: str, max_concurrent: int) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(ctx, owner=owner, max_concurrent=max_concurrent)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
