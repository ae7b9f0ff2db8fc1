"""``dsh-sandbox mcp``: serve the model-facing tools to an MCP client over stdio (or HTTP).

One process is one client and one session: the session is built once, from
the same flags and config files as ``tool call`` (``build_tool_context``,
hence ``build_session``), with the job registry and the terminals mounted, so
the runner stays warm and jobs and terminals live as long as the client is
connected.  When the client goes (stdin closes), or the server gets SIGTERM,
SIGHUP or SIGINT, the session is closed and everything it started is killed.

``--http ADDR`` serves streamable HTTP instead (``mcp_http``): one session
per client, each with its own jobs and terminals, behind a bearer token.

``--print-config claude|codex|cursor`` prints what registers this server with
that client instead, with the same flags and the absolute path of this
executable.  The MCP SDK is imported only when the server really starts.
"""

from __future__ import annotations

from typing import Any

import click
from dsh.cli.tool import context_options
from dsh.sandbox.errors import UsageError

#: The owner of every job and terminal of the session (stdio serves one client).
OWNER = "mcp"

_EXTRA_HINT = "install the mcp extra: pip install 'dsh-sandbox[mcp]'"


def session_services(persistent: bool) -> tuple[Any, ...]:
    """What a long-lived session mounts beside the executor: jobs and terminals
    (and the persistent shells, which turn ``bash`` into the persistent one)."""
    from dsh.sandbox.context import CompositionEntry

    services = [
        CompositionEntry("jobs", "jobs", {}),
        CompositionEntry("terminals", "terminals", {}),
        CompositionEntry("terminal-bash", "terminal-bash", {}),
    ]
    if persistent:
        services.append(CompositionEntry("persistent-shells", "persistent-shells", {}))
    return tuple(services)


def _refuse_terminal_prompt(ctx: Any) -> None:
    """A prompt on the terminal cannot work here: stdin and stdout carry the
    protocol, and the terminal (if any) belongs to the client's own UI."""
    from dsh.sandbox.approval import Approval, PromptApproval

    if isinstance(ctx.get(Approval), PromptApproval):
        raise UsageError(
            "--approval prompt: the MCP server has no terminal to ask on (stdin and stdout carry the "
            "protocol); use --approval rules:FILE, or deny (the default), or set approval in the "
            "config files to one of them"
        )


@click.command("mcp", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--print-config", "print_config", type=click.Choice(["claude", "codex", "cursor"]),
    help="Print what registers this server (with these flags) with that client, and exit.",
)
@click.option(
    "--persistent", is_flag=True,
    help="Offer the persistent bash tool: cwd and exports last across calls (default: one-shot bash).",
)
@click.option(
    "--max-concurrent-calls", type=click.IntRange(1, 64), default=8, show_default=True,
    help="Tool calls that run at once; further calls wait.",
)
@click.option(
    "--http", "http", metavar="ADDR",
    help="Serve streamable HTTP on ADDR ([HOST:]PORT, loopback unless a host is given) instead of stdio; "
         "clients send Authorization: Bearer $DSH_MCP_TOKEN (a token is made and printed if unset).",
)
@click.option(
    "--idle-timeout", type=click.FloatRange(1, 86400), default=600, show_default=True, metavar="SECONDS",
    help="With --http: a client session with no request for this long ends, and so does all it started.",
)
@context_options
def mcp(print_config: str | None, persistent: bool, max_concurrent_calls: int, http: str | None,
        idle_timeout: float, **context: Any) -> None:
    """Serve the sandboxed tools (bash, pwsh, jobs, terminals) to an MCP client over stdio.

    The tools, their schemas and what they print are those of ``tool call``,
    under the same policy flags and config files.  One session per process:
    jobs and terminals last until the client disconnects, and then everything
    the session started is killed.  Escalations go to the approval provider
    (default: deny; --approval elicit asks the client's user, --approval
    rules:FILE a rules file; prompt is refused: the terminal is the client's).
    """
    if print_config is not None:
        from dsh.cli.mcp_config import client_config

        params = click.get_current_context().params
        click.echo(client_config(print_config, params), nl=False)
        return
    try:
        import mcp as _sdk  # noqa: F401  (fail before anything is built)
    except ImportError:
        raise UsageError(f"mcp: the MCP SDK is not installed; {_EXTRA_HINT}") from None
    from dsh.cli.tool import build_tool_context

    if context.get("composition") is None:
        context["services"] = session_services(persistent)
    elif persistent:
        raise UsageError("--persistent conflicts with --composition: mount persistent-shells in the "
                         "composition file, or drop --composition")
    from dsh.cli.signals import Stopped

    listening = None
    if http is not None:
        from dsh.cli import mcp_http

        token = _http_token()
        listening = mcp_http.bind(*mcp_http.parse_address(http))
    ctx = build_tool_context(one_shot=False, **context)
    try:
        _refuse_terminal_prompt(ctx)
        if listening is not None:
            _announce(listening, token)
            mcp_http.serve_http(ctx, owner=OWNER, max_concurrent=max_concurrent_calls, sock=listening,
                                token=token, idle_s=idle_timeout)
            return
        from dsh.cli.mcp_server import serve_stdio

        serve_stdio(ctx, owner=OWNER, max_concurrent=max_concurrent_calls)
    except BaseException as exc:
        # Raised where the signal landed: in the event loop, or in a task
        # (then wrapped in the task group's exception group).
        stopped = exc if isinstance(exc, Stopped) else (
            exc.subgroup(Stopped) if isinstance(exc, BaseExceptionGroup) else None)
        if stopped is None:
            raise
        ctx.close()
        first = stopped if isinstance(stopped, Stopped) else _first(stopped)
        _exit_now(first)
    finally:
        ctx.close()
        if listening is not None:
            listening.close()


#: Where ``--http`` takes its bearer token from.
TOKEN_VARIABLE = "DSH_MCP_TOKEN"


def _http_token() -> str:
    """The token clients must send: ``$DSH_MCP_TOKEN``, or a new random one."""
    import os
    import secrets

    from dsh.cli.mcp_http import MIN_TOKEN_CHARS

    given = os.environ.get(TOKEN_VARIABLE)
    if given is None:
        return secrets.token_urlsafe(32)
    if len(given) < MIN_TOKEN_CHARS or not given.isascii() or not given.isprintable() or " " in given:
        raise UsageError(f"{TOKEN_VARIABLE}: the token must be at least {MIN_TOKEN_CHARS} printable ASCII "
                         "characters without spaces; unset it to have one made, or use e.g. "
                         "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    return given


def _announce(sock: Any, token: str) -> None:
    """Where clients connect, on stderr (stdout stays free); a token that was
    made here is printed once, since no client could know it otherwise."""
    import os

    from dsh.cli.mcp_http import ENDPOINT

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    made = "" if os.environ.get(TOKEN_VARIABLE) else f"; bearer token: {token}"
    click.echo(f"dsh-sandbox: MCP over HTTP at http://{shown}:{port}{ENDPOINT}{made}", err=True)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    inner = group.exceptions[0]
    return _first(inner) if isinstance(inner, BaseExceptionGroup) else inner


def _exit_now(stopped: BaseException) -> None:
    """Exit once the session is closed, without joining the thread that reads
    stdin: stopped by a signal while the client still holds the pipe open, that
    read never returns, and Python waits for it at exit forever."""
    import os
    import sys

    sys.stderr.write(f"dsh-sandbox: {stopped}; what it started was stopped\n")
    sys.stderr.flush()
    os._exit(getattr(stopped, "exit_status", 1))
