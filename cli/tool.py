"""``dsh-sandbox tool``: print the tool specs, or make one tool call.

``tool call bash '{"command": "ls", "description": "list"}'`` runs the call
through a composition and prints exactly what the model would see.  Without
``--composition`` the context is the sandboxed default: the policy service
(``--mode``, ``--workspace``), the runner host (``--runner``), a sandboxed
bash (or ``--shell pwsh``) executor and the approval provider (``--approval
deny|prompt|rules:FILE``).  The context is torn down when the command ends, so
no job could outlive the call: the default context mounts no job registry (a
command still running at ``timeout_ms`` is killed and says so, and the spec
offers no ``run_in_background``), ``run_in_background`` and the job tools are
refused with exit 2, and so is a composition that mounts ``jobs``.  Jobs need
a long-lived process: `dsh-sandbox mcp`, or one that embeds the tools.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click
from dsh.cli.options import host_flags, keep_spill_files, settings_flags
from dsh.cli.run_output import is_terminal
from dsh.sandbox.context import Context
from dsh.sandbox.errors import UsageError
from dsh.sandbox.modes import SandboxMode

if TYPE_CHECKING:
    from dsh.sandbox.session import SessionSpec

#: What to use instead of a job in a one-shot call (every refusal names it).
LONG_LIVED = (
    "jobs need a long-lived session: serve the tools with dsh-sandbox mcp, or embed them in your "
    "own process (dsh.tools.toolbox.call_tool on a context that mounts jobs) and keep it open"
)
JOB_TOOLS = ("job_output", "job_kill")
#: Terminal sessions outlive a call only in a long-lived session, like jobs.
TERMINAL_TOOLS = ("terminal_open", "terminal_send", "terminal_read", "terminal_signal", "terminal_close",
                  "terminal_list")


def tool_session(
    *,
    composition: str | None,
    shell: str,
    mode: str | None,
    profile: str | None,
    workspace: str | None,
    runner: str | None,
    approval: str | None,
    env: tuple[tuple[str, str], ...] = (),
    accept_degraded: tuple[str, ...] = (),
    image: str | None = None,
    trust_project: bool = False,
    allow_domain: tuple[str, ...] = (),
    deny_domain: tuple[str, ...] = (),
    services: tuple[Any, ...] = (),
) -> SessionSpec:
    """The session the tool options and the config files describe (the executor
    starts in the workspace); a composition describes the whole session instead.
    ``services``: further providers a long-lived caller mounts (jobs, terminals)."""
    import os
    from pathlib import Path

    from dsh.cli.settings import Flags, resolve
    from dsh.sandbox.session import SessionSpec

    flags = Flags(profile=profile, mode=mode, runner=runner, approval=approval, env=tuple(env),
                  accept_degraded=tuple(accept_degraded), image=image, trust_project=trust_project)
    if composition is not None:
        given = {"--mode": mode, "--profile": profile, "--workspace": workspace, "--runner": runner,
                 "--approval": approval, "--env": env or None, "--accept-degraded": accept_degraded or None,
                 "--image": image, "--trust-project": trust_project or None,
                 "--allow-domain": allow_domain or None, "--deny-domain": deny_domain or None}
        clashing = [flag for flag, value in given.items() if value is not None]
        if clashing:
            raise UsageError(
                f"--composition conflicts with {', '.join(clashing)}: "
                "configure them in the composition file, or drop --composition"
            )
        return SessionSpec(composition=composition)
    if mode is not None:
        SandboxMode.parse(mode, field="--mode")
    settings = resolve(flags, os.environ, Path(workspace or "."))
    return SessionSpec(
        mode=settings["mode"],
        profile=settings["profile"],
        workspace=workspace,
        network=settings["network"],
        network_source=settings.values["network"].source if settings["network"] is not None else None,
        allow_domains=tuple(allow_domain),
        deny_domains=tuple(deny_domain),
        accept_degraded=settings.accepted(),
        runner=settings["runner"],
        runner_options=settings.runner_options(os.environ),
        env=dict(settings.env_pairs()),
        executor=f"{shell}-sandbox",
        approval=settings["approval"] or "deny",
        # The result names spill files ("full output: PATH"): they must outlive the call.
        services=(keep_spill_files(), *services),
    )



def build_tool_context(*, one_shot: bool = True, **options: Any) -> Context:
    """The session of ``tool`` (``one_shot``: each call its own session) or of a
    long-lived server (``one_shot=False``: the session outlives every call)."""
    from dsh.executors.seam import ShellExecutor
    from dsh.sandbox.session import build_session

    composition: str | None = options.get("composition")
    ctx = build_session(tool_session(**options))
    if not ctx.has(ShellExecutor):
        ctx.close()
        raise UsageError(
            f"--composition {composition}: mounts no executor (ShellExecutor); add e.g. {{name: bash-sandbox}}"
        )
    from dsh.sandbox.approval import Approval
    from dsh.sandbox.config_trust import refuse_untrusted_config

    try:
        refuse_untrusted_config(ctx, composition)
        approver = ctx.get(Approval)
        from dsh.sandbox.approval_elicit import ElicitApproval

        if one_shot and isinstance(approver, ElicitApproval):
            raise UsageError("--approval elicit: only dsh-sandbox mcp has a client to ask; "
                             "use deny, prompt or rules:FILE here")
        if approver is not None and one_shot:
            # Each call is a session of its own: a run denied in one call must
            # still be known when the next call asks to re-run it wider.
            approver.keep_denied_runs()
    except BaseException:
        ctx.close()
        raise
    return ctx


def refuse_jobs(name: str, args: Any) -> None:
    """A one-shot call cannot start or reach a job: its session ends when it returns."""
    if name in JOB_TOOLS:
        raise UsageError(
            f"{name}: no job outlives a one-shot tool call (each call is its own session), so "
            f"there is no job to reach; {LONG_LIVED}"
        )
    if name in TERMINAL_TOOLS:
        raise UsageError(
            f"{name}: a terminal lives until it is closed, and a one-shot tool call closes its session "
            "when it returns; serve the tools with dsh-sandbox mcp, or embed them in your own process "
            "(dsh.tools.toolbox.call_tool on a context "
            "that mounts terminals and terminal-bash) and keep it open"
        )
    if isinstance(args, dict) and args.get("run_in_background"):
        raise UsageError(
            "run_in_background: a one-shot tool call ends its session when it returns, which "
            "would kill the job at once; run the command in the foreground (raise timeout_ms), "
            f"or {LONG_LIVED}"
        )


#: Tool arguments are a flat object; nothing real nests deeper than this.
MAX_JSON_DEPTH = 64


def _check_json_depth(text: str) -> None:
    """``UsageError`` when ``text`` nests arrays or objects deeper than
    ``MAX_JSON_DEPTH`` (the parser would recurse until Python gives up)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise UsageError(
                    f"JSON: the tool arguments nest deeper than {MAX_JSON_DEPTH} levels; "
                    'pass a flat object, e.g. \'{"command": "ls", "description": "list files"}\''
                )
        elif char in "]}":
            depth -= 1


def context_options(fn: Any) -> Any:
    """The session flags of ``tool spec``/``tool call`` (and of ``mcp``)."""
    for option in reversed(
        [
            click.option("--composition", metavar="FILE", help="Build the context from this file."),
            click.option(
                "--shell", type=click.Choice(["bash", "pwsh"]), default="bash", show_default=True,
                help="Executor family of the default context.",
            ),
            click.option("--mode", type=click.Choice([m.value for m in SandboxMode]),
                         help="Session sandbox mode (default: the profile's, else workspace-write)."),
            click.option("--profile", metavar="NAME|FILE", help="Built-in profile name or a profile file."),
            click.option("--workspace", metavar="DIR", help="Workspace root (default: cwd)."),
            click.option("--runner", help="Runner to use (default: the config files', else auto)."),
            click.option("--approval", metavar="deny|prompt|rules:FILE",
                         help="Who approves escalations (default: the config files', else deny)."),
            *settings_flags(),
            *host_flags(),
        ]
    ):
        fn = option(fn)
    return fn


@click.group("tool", context_settings={"help_option_names": ["-h", "--help"]})
def tool() -> None:
    """Model-facing tools: print specs, make one tool call."""


@tool.command("spec")
@click.option("--format", "fmt", type=click.Choice(["openai", "anthropic"]), default="openai",
              show_default=True, help="Tool spec style.")
@context_options
def spec_cmd(fmt: str, **context: Any) -> None:
    """Print the tool definitions (JSON) as the model would get them.

    Without --composition: the context ``tool call`` uses, which mounts no job
    registry (no job outlives a one-shot call), so no run_in_background and no
    job tools.  With --composition: whatever that composition mounts.
    """
    from dsh.tools.toolbox import export_specs

    ctx = build_tool_context(**context)
    try:
        click.echo(json.dumps(export_specs(ctx, "openai" if fmt == "openai" else "anthropic"),
                              indent=2, ensure_ascii=False))
    finally:
        ctx.close()


@tool.command("call")
@click.argument("name")
@click.argument("arguments", metavar="JSON")
@click.option("--owner", default="cli", show_default=True, help="Agent that owns the call's jobs.")
@click.option("--json", "as_json", is_flag=True, help="Print {content, is_error, job_id}.")
@click.option(
    "--raw-output", is_flag=True,
    help="On a terminal, print the command's escape sequences as they are "
    "(default: shown escaped, e.g. \\x1b]52;...).",
)
@context_options
def call_cmd(name: str, arguments: str, owner: str, as_json: bool, raw_output: bool, **context: Any) -> None:
    """Make one tool call NAME with JSON arguments; print what the model would see.

    Exit status 1 when the result is an error result (bad arguments, rejected
    escalation, sandbox unavailable), else 0.
    """
    from dsh.tools.toolbox import call_tool

    _check_json_depth(arguments)
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise UsageError(f"JSON: the tool arguments are not valid JSON ({exc}); "
                         'pass e.g. \'{"command": "ls", "description": "list files"}\'') from None
    refuse_jobs(name, args)
    ctx = build_tool_context(**context)
    try:
        from dsh.tools.jobs import JobRegistry

        if ctx.has(JobRegistry):
            raise UsageError(
                f"--composition {context['composition']}: mounts a job registry (jobs), but every job "
                "is killed when a one-shot tool call returns, so a command outliving timeout_ms would "
                f"be announced as running and then killed; drop the jobs entry for tool call ({LONG_LIVED})"
            )
        result = call_tool(ctx, name, args, owner=owner)
    finally:
        ctx.close()
    if as_json:
        click.echo(json.dumps({"content": result.content, "is_error": result.is_error,
                               "job_id": result.job_id}, ensure_ascii=False))
    elif not raw_output and is_terminal(sys.stdout):
        # What the command printed must not act on the terminal (clipboard,
        # title, clear screen): shown, not obeyed, as ``run`` does.
        from dsh.sandbox.terminal_text import printable

        click.echo(printable(result.content, keep="\n\t"))
    else:
        click.echo(result.content)
    sys.stdout.flush()
    raise SystemExit(1 if result.is_error else 0)
