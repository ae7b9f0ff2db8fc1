"""``dsh-sandbox hook``: run a harness's hook commands under the sandbox policy.

An agent harness (Claude Code, Codex) runs ``dsh-sandbox hook --settings FILE
--event NAME`` as its one hook command.  The bridge reads the event's JSON
payload from stdin, picks the handlers of FILE that match it, runs each
``command`` as ``bash -c COMMAND`` through the same session ``run`` builds
(mode, profile, runner, workspace, config files), with the payload on the
command's stdin, all of them at once, each under its own ``timeout``; then it
prints the combined answer the harness reads (``dsh.tools.hook_decision``).

A hook command is configuration a repository may carry, so it never runs
outside the sandbox: a session that cannot be built, or a hook the runner
cannot start, is reported, and on a gate event blocks the call.  The settings
file decides which guards run, so it must lie outside every writable root,
like a profile, and outside dsh-sandbox's run state (sandbox HOMEs, spill
files), which sandboxed commands write.  Bad input is exit 2, which the harness reads as a block.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click
from dsh.cli.options import settings_options
from dsh.cli.run_options import RunOptions, apply_to_run, check_session_options
from dsh.cli.run_output import is_terminal
from dsh.sandbox.errors import DshError, SandboxUnavailable, UsageError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.terminal_text import printable
from dsh.tools.hook_config import EVENTS, FORMATS, Handler, HookConfig, HookFormat, event_problem
from dsh.tools.hook_decision import HookOutcome, Status, combine, render

#: The largest event payload read from stdin (a Write of a large file carries it whole).
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024


def load_settings(path: str, fmt: HookFormat) -> tuple[HookConfig, str]:
    """The hooks of ``path`` and the real path of the file read."""
    from dsh.sandbox.input_files import InputFileError, read_input_file
    from dsh.tools.hook_config import parse_json_settings, parse_toml_settings

    try:
        read = read_input_file(path)
    except InputFileError as exc:
        # The reader's own fix speaks of config files; a pipe here is a settings file given wrongly.
        fix = ("name the settings file itself (a regular file, not a pipe or device)"
               if exc.problem.endswith("not a regular file") else exc.fix)
        raise UsageError(f"--settings {exc.path}: {exc.problem}; {fix}") from None
    refuse_state_settings(path, read.real)
    if path.endswith(".toml"):
        return parse_toml_settings(read.text, path), read.real
    return parse_json_settings(read.text, path, fmt), read.real


def refuse_state_settings(shown: str, real: str) -> None:
    """A settings file inside dsh-sandbox's run state is refused: the sandbox
    HOMEs, spill files and private ``/tmp`` of every workspace are written by
    sandboxed commands by design, so a file there is another run's output, not
    the user's guard list.  The user's configuration directory is not run state
    (no root may hold it), and stays the place for the file."""
    from pathlib import Path

    from dsh.sandbox.own_state import run_state_dirs
    from dsh.sandbox.policy_paths import is_within

    for state, holds in run_state_dirs():
        if is_within(Path(real), state):
            raise UsageError(f"--settings {shown}: {real} lies inside {state}, which holds {holds} of "
                             "dsh-sandbox that sandboxed commands write; keep the settings file outside "
                             "dsh-sandbox's state, e.g. in ~/.config/dsh-sandbox/")


def read_payload(event: str, fmt: HookFormat) -> tuple[bytes, dict[str, Any]]:
    """The event's JSON payload from stdin: the bytes (passed on as they are) and the object."""
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("stdin: pipe the event's JSON payload in, as the harness does "
                         "(echo '{\"tool_name\": \"Bash\"}' | dsh-sandbox hook ...)")
    data = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise UsageError(f"stdin: the payload is over {MAX_PAYLOAD_BYTES // 2**20} MiB; no hook event is this large")
    try:
        payload = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise UsageError("stdin: the payload is not a JSON object (UTF-8); pass the event's JSON "
                         "as the harness sends it") from None
    if not isinstance(payload, dict):
        raise UsageError("stdin: the payload is JSON but not an object; pass the event's JSON object")
    named = payload.get("hook_event_name")
    if named is not None and named != event:
        raise UsageError(f"stdin: hook_event_name is {named!r} but --event is {event!r}; pass the same event")
    field = EVENTS[fmt][event]
    if field == "tool_name" and not isinstance(payload.get(field), str):
        raise UsageError(f"stdin: a {event} payload needs tool_name (a string) to choose its hooks")
    if field is not None and payload.get(field) is not None and not isinstance(payload[field], str):
        raise UsageError(f"stdin: {field} must be a string")
    return data, payload


def bridge(opts: RunOptions, settings: str, event: str, fmt: HookFormat) -> tuple[int, str, str]:
    """Check, select, run under the sandbox, combine: (exit status, stdout, stderr)."""
    problem = event_problem(fmt, event)
    if problem is not None:
        raise UsageError(f"--event: {problem}")
    check_session_options(opts)
    opts = apply_to_run(opts)
    config, real = load_settings(settings, fmt)
    payload, parsed = read_payload(event, fmt)
    handlers = config.select(event, parsed)
    outcomes = run_hooks(opts, handlers, payload, settings, real, fmt)
    return render(combine(event, outcomes), event, fmt)


def run_hooks(opts: RunOptions, handlers: tuple[Handler, ...], payload: bytes, settings: str, real: str,
              fmt: HookFormat) -> list[HookOutcome]:
    from dsh.cli.run import session_spec
    from dsh.sandbox.session import build_session

    try:
        # No spill files are kept: nothing names them after the bridge answers.
        ctx = build_session(dataclasses.replace(session_spec(opts), services=()))
    except SandboxUnavailable as exc:
        failed = [HookOutcome(h.label, "failed", note=f"the sandbox is unavailable: {exc}") for h in handlers]
        return failed or [HookOutcome("the sandbox session", "failed", note=str(exc))]
    try:
        from dsh.sandbox.config_trust import refuse_untrusted_config
        from dsh.sandbox.policy_guard import refuse_writable_config_file
        from dsh.sandbox.policy_service import PolicyService

        service = ctx.require(PolicyService)
        roots = service.trusted_roots()
        refuse_untrusted_config(ctx, None, None)
        if opts.user_config is not None:
            refuse_writable_config_file("user config", opts.user_config, roots, real=opts.user_config)
        # The file chooses which guards run: a sandboxed command must not be able to edit it.
        refuse_writable_config_file("--settings", settings, roots, real=real)
        env = {"CLAUDE_PROJECT_DIR": str(service.workspace)} if fmt == "claude" else {}
        return _run_all(ctx, handlers, payload, env)
    finally:
        ctx.close()


def _run_all(ctx: Any, handlers: tuple[Handler, ...], payload: bytes, env: dict[str, str]) -> list[HookOutcome]:
    from dsh.executors.seam import ShellExecRequest, ShellExecutor

    executor = ctx.require(ShellExecutor)
    started: list[tuple[Handler, Any, Any] | HookOutcome] = []
    for handler in handlers:
        if handler.kind != "command":
            started.append(HookOutcome(handler.label, "failed",
                                       note=f"type {handler.kind!r} hooks are not run by dsh-sandbox hook"))
            continue
        # The format asks for a shell string: bash -c COMMAND, nothing joined to it.
        request = ShellExecRequest(command=handler.command, timeout_ms=max(1, round(handler.timeout_s * 1000)),
                                   stdin=payload, env=env)
        try:
            spec = executor.resolve(request)
            started.append((handler, executor.execute(spec), spec))
        except UsageError:
            raise
        except DshError as exc:
            started.append(HookOutcome(handler.label, "failed", note=_error_text(exc)))
    outcomes: list[HookOutcome] = []
    try:
        for item in started:
            if isinstance(item, HookOutcome):
                outcomes.append(item)
                continue
            handler, execution, spec = item
            try:
                outcomes.append(_outcome(handler, execution.result(), spec))
            except UsageError:
                raise
            except DshError as exc:
                outcomes.append(HookOutcome(handler.label, "failed", note=_error_text(exc)))
    finally:
        for item in started:
            if not isinstance(item, HookOutcome):
                item[1].kill()
    return outcomes


def _error_text(exc: DshError) -> str:
    text = str(exc)
    return text if text.startswith(exc.code) else f"{exc.code}: {text}"


def _outcome(handler: Handler, result: Any, spec: Any) -> HookOutcome:
    from dsh.cli.run_output import did_not_start
    from dsh.sandbox.terminal_text import printable

    facts = result.sandbox
    notes: list[str] = []
    if facts is not None and facts.denied:
        notes.append(_denial(result, spec, facts))
    elif facts is not None and facts.refusal_note:
        notes.append(facts.refusal_note)
    if facts is not None and facts.trusted_changed:
        notes.append("it changed files a later host action trusts: " + ", ".join(facts.trusted_changed[:10]))
    if facts is not None and facts.removed_from_git:
        notes.append("links it made inside a git directory were removed (git would have written through them): "
                     + ", ".join(facts.removed_from_git[:10]))
    note = printable("; ".join(notes))
    fields: dict[str, Any] = {"exit_code": result.exit_code, "stdout": result.stdout.text,
                              "stderr": result.stderr.text, "output_cut": result.stdout.truncated}
    if did_not_start(result):
        why = facts.runner_error if facts is not None and facts.runner_error else result.stderr.text.strip()
        return HookOutcome(handler.label, "failed", note=printable(f"the runner did not start it ({why})"))
    if result.timed_out:
        return HookOutcome(handler.label, "timeout", note=f"after {handler.timeout_s:g}s and was killed", **fields)
    if result.exit_code is None:
        return HookOutcome(handler.label, "failed", note=f"killed by {result.signal}", **fields)
    if result.exit_code in (126, 127):
        # Most often a script the sandbox does not show (a hidden path, ~ naming the
        # sandbox HOME, a container without it): the hook never ran.
        first = "".join(f": {line}" for line in result.stderr.text.strip().splitlines()[:1])
        why = f"it could not be executed in the sandbox (exit status {result.exit_code}{first})"
        return HookOutcome(handler.label, "failed", note=printable(why), **fields)
    status: Status = "ok" if result.exit_code == 0 else "block" if result.exit_code == 2 else "error"
    if status == "error" and result.exit_code >= 128:
        # Runners that cannot report a signal (bwrap's init, a container) hand
        # back 128+N for a hook killed by signal N: the OOM killer, a crash.
        note = "; ".join(filter(None, (f"it was probably killed by signal {result.exit_code - 128} "
                                       f"(exit status {result.exit_code})", note)))
    # Any refusal the run reports (a write, a read, a connection under
    # network-off, a socket, IPC) means the sandbox, not the guard, decided how it ended.
    denied = facts is not None and (facts.denied or bool(facts.refusal_note))
    return HookOutcome(handler.label, status, note=note, denied=denied, **fields)


def _denial(result: Any, spec: Any, facts: Any) -> str:
    from dsh.executors.denial import find_denial, hint

    line = f"denied by the sandbox under {facts.mode}"
    if spec.sandbox_policy is not None:
        denial = find_denial(spec.sandbox_policy, exit_code=result.exit_code,
                             outputs=(result.stderr.text, result.stdout.text), workdir=spec.workdir)
        line = hint(denial, facts.mode) if denial is not None else line
    return f"{line} ({facts.refusal_note})" if facts.refusal_note else line


def _complete_event(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    names = sorted({event for events in EVENTS.values() for event in events})
    return [name for name in names if name.startswith(incomplete)]


@click.command("hook", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--settings", "settings", required=True, metavar="FILE",
              help="The hooks configuration: a Claude Code settings.json, a Codex hooks.json or config.toml.")
@click.option("--event", required=True, metavar="NAME", shell_complete=_complete_event,
              help="The hook event (PreToolUse, PostToolUse, Stop, ...); its JSON payload comes on stdin.")
@click.option("--format", "hook_format", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
              help="Whose format and answer: claude, codex (auto: codex for a .toml file, else claude).")
@click.option("--mode", type=click.Choice([m.value for m in SandboxMode]),
              help="Sandbox mode (default: the profile's, else workspace-write).")
@click.option("--profile", metavar="NAME|FILE", help="Built-in profile name or a profile file.")
@click.option("--runner", metavar="auto|NAME", help="Runner that enforces the policy (default: auto).")
@click.option("--workspace", metavar="DIR", help="Workspace root, the project (default: the current directory).")
@click.option("--workdir", metavar="DIR", help="Where the hooks start (default: the workspace).")
@click.option("--writable", multiple=True, metavar="PATH", help="Extra writable root (repeatable).")
@click.option("--force-writable", multiple=True, metavar="PATH",
              help="Accept PATH as a writable root although it holds credentials or start-up files.")
@click.option("--network/--no-network", default=None, help="Allow or block network access.")
@settings_options
def hook(**params: Any) -> None:
    """Run the hooks of a harness configuration for one event, in the sandbox.

    \b
    echo "$PAYLOAD" | dsh-sandbox hook --settings ~/.config/dsh-sandbox/hooks.json --event PreToolUse

    Exit status and output are the combined answer the harness reads: 0 with
    JSON (or the hooks' text) on stdout, or 2 with the blocking reasons on
    stderr.  Bad input is also 2, so a guard that cannot be read blocks.
    """
    settings, event, chosen = params.pop("settings"), params.pop("event"), params.pop("hook_format")
    fmt: HookFormat = chosen if chosen != "auto" else ("codex" if settings.endswith(".toml") else "claude")
    if fmt == "claude" and settings.endswith(".toml"):
        raise UsageError("--format claude: Claude Code settings are JSON; a .toml file is Codex's config.toml "
                         "(use --format codex)")
    many = ("writable", "force_writable", "env", "accept_degraded")
    fields: dict[str, Any] = {k: (tuple(v) if k in many else v) for k, v in params.items()}
    opts = RunOptions(**fields, tty=False)
    code, out, err = bridge(opts, settings, event, fmt)
    sys.stdout.write(out)
    sys.stdout.flush()
    # The blocking reasons are the hooks' own stderr: on a person's terminal
    # their escape sequences (a clipboard write, a title) are shown escaped.
    sys.stderr.write(printable(err, keep="\n\t") if is_terminal(sys.stderr) else err)
    raise SystemExit(code)
