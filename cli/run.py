"""``dsh-sandbox run``: run one command under a sandbox policy.

``run -- ARGV...`` runs ARGV exactly (no shell in between: the argv reaches the
runner and ``execve`` byte for byte); ``run -c STRING`` runs STRING through the
bash executor, as the model-facing ``bash`` tool does.  Output is streamed as
it arrives, the exit status is mirrored like a shell's (127 not found, 126
not executable, 128+N for a signal, 124 for a timeout, 130 when interrupted,
125 when the sandbox failed and nothing ran), ``--json`` prints the
``ShellRunResult`` instead.  Every bad input is refused before anything runs
(exit 2).

Start-up cost matters (``run -- true`` should cost little more than starting
Python), so this module builds its context from directly imported providers
instead of scanning entry points, and never imports Docker or E2B code unless
that runner is asked for.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource
from dsh.cli.options import keep_spill_files, network_options, seconds_flag, settings_options
from dsh.cli.run_options import DEFAULT_KEEP_WARM_S, KEEP_WARM_ENV, RunOptions, apply_to_run, check_options, keep_warm
from dsh.cli.run_output import (
    LiveStreams,
    closed_stream,
    exit_status,
    follow,
    note,
    output_failed,
    report,
    report_left,
    result_json,
)
from dsh.sandbox.errors import UsageError
from dsh.sandbox.modes import SandboxMode

if TYPE_CHECKING:
    from dsh.sandbox.approval import Approval
    from dsh.sandbox.context import Context
    from dsh.sandbox.session import SessionSpec

#: ``--timeout`` above this is capped (and the cap reported).  Without
#: ``--timeout`` a command may run this long, or the profile's wall time.
CLI_MAX_TIMEOUT_S = 24 * 3600
#: The in-memory tail the CLI keeps per stream (for ``--json``); the live
#: stream shows everything as it comes.
CLI_MAX_OUTPUT_BYTES = 4 * 1024 * 1024


# -- the context ------------------------------------------------------------------------

def session_spec(opts: RunOptions, *, executor: str = "bash") -> SessionSpec:
    """The session ``opts`` describe: the policy, the runner host, a sandboxed
    executor and (``--approval prompt|rules:FILE``) the approval provider."""
    from dsh.sandbox.session import SessionSpec

    if opts.composition is not None:
        return SessionSpec(composition=opts.composition)
    return SessionSpec(
        mode=opts.mode,
        profile=opts.profile,
        workspace=opts.workspace,
        writable=opts.writable,
        force_writable=opts.force_writable,
        network=opts.network,
        network_source=opts.network_source,
        allow_domains=opts.allow_domain,
        deny_domains=opts.deny_domain,
        accept_degraded=opts.accept_degraded,
        runner=opts.runner or "auto",
        runner_options={name: dict(values) for name, values in opts.runner_options},
        env=dict(opts.env),
        executor=f"{executor}-sandbox",
        # Without --workdir the executor starts in the policy's workspace.
        executor_config={
            **({"cwd": opts.workdir} if opts.workdir is not None else {}),
            "max_timeout_ms": CLI_MAX_TIMEOUT_S * 1000,
            "max_output_bytes": CLI_MAX_OUTPUT_BYTES,
        },
        approval=None if opts.approval in (None, "deny") else opts.approval,
        # The notes and --json name spill files: they must outlive the run.
        services=(keep_spill_files(),),
        keep_warm_s=keep_warm(opts),
    )


def open_run_session(opts: RunOptions, *, executor: str = "bash") -> Context:
    """The context of a ``run``; ``--composition`` builds it from the file."""
    from dsh.executors.seam import ShellExecutor
    from dsh.sandbox.session import build_session

    ctx = build_session(session_spec(opts, executor=executor))
    if not ctx.has(ShellExecutor):
        ctx.close()
        raise UsageError(
            f"--composition {opts.composition}: mounts no executor (ShellExecutor); "
            "add an entry such as {name: bash-sandbox}"
        )
    return ctx


# -- running ----------------------------------------------------------------------------
def make_request(opts: RunOptions, ctx: Context) -> Any:
    from dsh.executors.seam import ShellExecRequest

    timeout_ms: int | None = None
    if opts.timeout_s is not None:
        timeout_ms = min(int(opts.timeout_s * 1000), sys.maxsize)
    elif opts.composition is None:
        # Our own executor: the profile's wall time, else the CLI's cap.  (A
        # composition's executor keeps its own default.)
        from dsh.sandbox.policy_service import PolicyService

        # The profile's limit, not a resolved policy's: resolving searches every
        # writable root, which the executor does again right before the spawn.
        wall = ctx.require(PolicyService).profile.limits.wall_time_s
        timeout_ms = int(wall * 1000) if wall else CLI_MAX_TIMEOUT_S * 1000
    if opts.tty:
        from dsh.cli.run_tty import terminal_size
        from dsh.executors.seam import TerminalSize
        from dsh.sandbox.stdin_feed import StdinFeed

        size = TerminalSize(*terminal_size())
        argv = tuple(opts.argv) if opts.argv else ("bash", "-c", opts.command or "")
        return ShellExecRequest(command=opts.command or "", argv=argv, timeout_ms=timeout_ms,
                                stdin=StdinFeed(), terminal=size)
    from dsh.cli.run_tty import piped_stdin

    stdin = piped_stdin()
    if opts.argv:
        import shlex

        display = shlex.join(opts.argv)
        return ShellExecRequest(command=display, argv=tuple(opts.argv), timeout_ms=timeout_ms, stdin=stdin)
    assert opts.command is not None
    return ShellExecRequest(command=opts.command, timeout_ms=timeout_ms, stdin=stdin)


def run_command(opts: RunOptions) -> int:
    """Check, build, run, stream and report; returns the exit status to mirror."""
    check_options(opts)
    if opts.composition is None:  # a composition is the whole configuration of its context
        opts = apply_to_run(opts)
    asks_here = opts.approval not in (None, "deny")
    if opts.tty and asks_here:
        raise UsageError(f"-t and --approval {opts.approval} conflict: an approval shows the denied command's "
                         "output escaped on this terminal, which a terminal session writes to as it is; drop one")
    if opts.tty is None:
        import dataclasses

        # A pty when a person is at the terminal, unless an approval may be asked there.
        tty = not opts.as_json and not asks_here and os.isatty(0) and os.isatty(1)
        opts = dataclasses.replace(opts, tty=tty)
    ctx = open_run_session(opts)
    try:
        from dsh.executors.seam import ShellExecutor
        from dsh.sandbox.config_trust import refuse_untrusted_config

        approver = approver_for(ctx, opts)
        refuse_untrusted_config(ctx, opts.composition, approver)
        if opts.user_config is not None:
            # Trusted in full (it may trust projects): a command must not be able to write it.
            from dsh.sandbox.policy_guard import refuse_writable_config_file
            from dsh.sandbox.policy_service import PolicyService

            roots = ctx.require(PolicyService).trusted_roots()
            refuse_writable_config_file("user config", opts.user_config, roots, real=opts.user_config)
        _note_missing_roots(ctx)
        executor = ctx.require(ShellExecutor)
        spec = executor.resolve(make_request(opts, ctx))
        if spec.timeout_capped and opts.timeout_s is not None:
            note(
                f"--timeout capped at {spec.timeout_ms // 1000}s "
                f"(asked {opts.timeout_s:g}s); the command is killed then"
            )
        # A prompt will be shown on this terminal if the run is denied.
        asks = getattr(approver, "prompter", None) is not None
        before = None
        if approver is not None:  # what a denied run changes is shown to the approver
            from dsh.executors.escalation import watch

            before = watch(approver, spec)
        code, result = _execute(executor, spec, opts, visible=asks)
        # --approval: a denied run may be re-run once under an approved mode.
        if result is not None and approver is not None:
            import getpass

            from dsh.executors.escalation import after_denial

            grant = after_denial(
                ctx, executor, spec, result, tool="dsh-sandbox run", owner=getpass.getuser(),
                requested_by="at the terminal", approval=approver, before=before,
            )
            if grant is not None and not grant.approved:
                note(f"escalation to {grant.mode.value} denied by {grant.decision.provider}: "
                     f"{grant.decision.reason}")
            elif grant is not None:
                note(f"escalation approved by {grant.decision.provider}: "
                     f"re-running once under {grant.mode.value}")
                retry = grant.resolve(executor, make_request(opts, ctx))
                code, result = _execute(executor, retry, opts, visible=asks)
        if opts.as_json and result is not None:
            try:
                click.echo(result_json(result))
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise output_failed("stdout", exc) from None
        return code
    finally:
        ctx.close()


def _note_missing_roots(ctx: Context) -> None:
    """A missing writable root (``--writable`` or a profile's) is not created:
    say so, or a later denial under it would be a puzzle."""
    from dsh.sandbox.policy_service import PolicyService

    service = ctx.get(PolicyService)
    if service is None:
        return
    for root in service.default_policy.missing_roots:
        note(f"writable root {root} does not exist: not created, not writable in this run")


def approver_for(ctx: Context, opts: RunOptions) -> Approval | None:
    """Who may approve re-running a denied run: none for ``--approval deny``
    (never asks); the provider ``--approval`` names beside a composition; else
    the context's own (``--approval`` without a composition mounted it).

    Built before the command runs, so a missing or untrusted rules file stops
    it first; the approval code is imported only when one can be asked."""
    if opts.approval == "deny" or (opts.approval is None and opts.composition is None):
        return None
    from dsh.sandbox.approval import Approval
    from dsh.sandbox.approval_choice import build_approval

    if opts.approval is not None and opts.composition is not None:
        return build_approval(ctx, opts.approval)
    return ctx.get(Approval)


def _execute(executor: Any, spec: Any, opts: RunOptions, *, visible: bool = False) -> tuple[int, Any]:
    """Run ``spec``, stream and report it: (exit status, result or None if stopped).

    ``visible``: a prompt may follow, so even colours are shown, not obeyed."""
    execution = executor.execute(spec)
    if spec.terminal is not None:
        return _attached(execution, spec)
    # Colours are kept unless a person is about to be asked on this terminal.
    live = None if opts.as_json else LiveStreams(execution, raw=opts.raw_output, colours=not visible)
    stopped = follow(execution, live)
    if stopped is not None:
        return stopped, None
    result = execution.result()
    if live is not None:
        live.pump()
        live.finish()
        for stream, lost in live.lost.items():
            if lost:
                note(
                    f"{lost} bytes of {stream} were not shown: the command wrote them "
                    "faster than they could be copied and past the spill cap"
                )
    report(result, spec)
    return exit_status(result), result


def _attached(execution: Any, spec: Any) -> tuple[int, Any]:
    from dsh.cli.run_tty import attach

    try:
        attach(execution, spec.stdin)
    except BaseException:
        execution.kill()
        execution.wait(None)
        report_left(execution)
        raise
    result = execution.result()
    report(result, spec)
    return exit_status(result), result


@click.command(
    "run",
    context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]},
)
@click.option(
    "--mode",
    type=click.Choice([m.value for m in SandboxMode]),
    help="Sandbox mode (default: the profile's, else workspace-write).",
)
@click.option("--profile", metavar="NAME|FILE", help="Built-in profile name or a profile file.")
@click.option(
    "--runner",
    metavar="auto|NAME",
    help="Runner that enforces the policy (default: the config files', else auto: the best available one).",
)
@click.option("--workspace", metavar="DIR", help="Workspace root (default: the current directory).")
@click.option("--workdir", metavar="DIR", help="Where the command starts (default: the workspace).")
@click.option("--writable", multiple=True, metavar="PATH", help="Extra writable root (repeatable).")
@click.option(
    "--force-writable",
    multiple=True,
    metavar="PATH",
    help="Accept PATH as a writable root although it holds credentials or start-up files "
    "($HOME, ~/.ssh, ~/.config...). Repeatable.",
)
@network_options
@click.option(
    "--timeout", "timeout_s", callback=seconds_flag, metavar="S", help="Kill the command after S seconds."
)
@click.option(
    "--keep-warm", "keep_warm_s", callback=seconds_flag, metavar="S", envvar=KEEP_WARM_ENV,
    help=f"Keep a sandbox that can outlive the run (a container) idle for S seconds for the next run of the "
    f"same workspace and policy, so it costs one exec; 0 removes it at exit (default: {DEFAULT_KEEP_WARM_S:g}; "
    f"env {KEEP_WARM_ENV}; a --composition file sets its own).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON, do not stream.")
@click.option("--composition", metavar="FILE", help="Build the context from a composition file.")
@click.option("-c", "command", metavar="STRING", help="Run STRING through bash (as the bash tool).")
@click.option(
    "--approval",
    metavar="deny|prompt|rules:FILE",
    help="If the run is denied, who may approve re-running it once under a wider mode.",
)
@click.option(
    "--raw-output",
    is_flag=True,
    help="On a terminal, pass the command's escape sequences through as they are "
    "(default: only colours; others are shown escaped, e.g. \\x1b]52;...).",
)
@click.option(
    "-t",
    "--tty/--no-tty",
    "tty",
    default=None,
    help="Run the command on a terminal (a pty inside the sandbox): full-screen programs, Ctrl-C and "
    "window size work (default: when stdin and stdout are terminals).",
)
@settings_options
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def run(**params: Any) -> None:
    """Run a command under a sandbox policy.

    \b
    dsh-sandbox run -- make test          # ARGV exactly, no shell in between
    dsh-sandbox run -c 'make test | tail' # through bash

    Exit status: the command's; 127 not found; 126 not executable; 128+N
    when it was killed by signal N, or when dsh-sandbox got SIGTERM, SIGHUP
    or SIGINT (the command is stopped first); 124 after --timeout; 125 when
    the sandbox cannot be enforced or the runner failed (nothing ran); 2 for
    bad input.
    """
    many = ("argv", "writable", "force_writable", "env", "accept_degraded", "allow_domain", "deny_domain")
    repeated: dict[str, Any] = {k: tuple(params[k]) for k in many}
    from_env = click.get_current_context().get_parameter_source("keep_warm_s") is ParameterSource.ENVIRONMENT
    opts = RunOptions(**{k: v for k, v in params.items() if k not in many}, **repeated, keep_warm_env=from_env)
    closed = closed_stream()
    if closed is not None:
        raise UsageError(f"{closed} is closed (>&-): the command's output has nowhere to go; "
                         f"redirect it to /dev/null instead (>/dev/null) if you do not want it")
    code = run_command(opts)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    except OSError as exc:
        raise output_failed("stdout", exc) from None
    raise SystemExit(code)
