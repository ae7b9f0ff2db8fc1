"""The ``dsh-sandbox`` command group and its error handling.

Subcommands live in their own modules and are imported only when invoked, so
``dsh-sandbox run`` starts without loading the profile, tool or SDK code.
User mistakes (``UsageError``) print one clear line and exit 2, no traceback;
a sandbox that cannot be enforced (``SandboxUnavailable``) exits 125.
"""

from __future__ import annotations

import errno
import importlib
import sys
from typing import Any

import click
from dsh.cli import VERSION_LINE, __version__, stdout_failed
from dsh.cli.group_help import COMMAND_GROUP
from dsh.sandbox.errors import DshError, SandboxUnavailable, UsageError

# name -> (module, attribute, short help).  The help is duplicated here so
# ``dsh-sandbox --help`` does not import every subcommand.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("dsh.cli.run", "run", "Run a command under a sandbox policy."),
    "shell": ("dsh.cli.shell", "shell", "Open an interactive bash in the workspace, in the sandbox."),
    "hook": ("dsh.cli.hook", "hook", "Run a Claude Code or Codex hooks configuration for one event, in the sandbox."),
    "profile": ("dsh.cli.profile", "profile", "List, show, validate and explain profiles."),
    "runners": ("dsh.cli.runners", "runners", "List runners: available or not, and what they enforce."),
    "tool": ("dsh.cli.tool", "tool", "Model-facing tools: print specs, make one tool call."),
    "mcp": ("dsh.cli.mcp_cmd", "mcp", "Serve the sandboxed tools to an MCP client (stdio)."),
    "conformance": ("dsh.cli.conformance.command", "conformance", "Prove each runner holds the modes on this machine."),
    "bench": ("dsh.cli.bench", "bench", "Measure what each runner costs against a bare spawn."),
    "config": ("dsh.cli.config_cmd", "config", "Show the effective configuration and where each value came from."),
    "completion": ("dsh.cli.completion", "completion", "Print the shell completion script (bash, zsh, fish)."),
}


def plugin_commands() -> dict[str, str]:
    """Name -> ``module:attr`` of the commands other packages register (a
    plugin cannot replace a command of the table above)."""
    from dsh.sandbox.registry import entry_points_of

    return {name: point.value for name, point in entry_points_of(COMMAND_GROUP).items() if name not in COMMANDS}


def _load(name: str, target: str) -> click.Command:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name.strip())
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name.startswith("dsh.") or name not in COMMANDS):
            return _unavailable(name, f"not installed in this build ({exc.name})")
        raise
    command = getattr(module, attr.strip(), None)
    if not isinstance(command, click.Command):
        return _unavailable(name, f"{target} is not a click command")
    return command


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *plugin_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is not None:
            return _load(cmd_name, f"{spec[0]}:{spec[1]}")
        target = plugin_commands().get(cmd_name)
        return _load(cmd_name, target) if target is not None else None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        # Help needs no current directory: the check below lets it through.
        ctx.meta["dsh.help"] = any(a in ("-h", "--help") for a in rest)
        return name, command, rest

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        # TAB after `dsh-sandbox ` must not import every subcommand's module
        # (click's default asks each command for its help): COMMANDS has it,
        # and a plugin command is completed by name alone.
        from click.shell_completion import CompletionItem

        names = [name for name in self.list_commands(ctx) if name.startswith(incomplete)]
        items: list[Any] = [CompletionItem(name, help=COMMANDS[name][2] if name in COMMANDS else None)
                            for name in names]
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in COMMANDS]
        # Only --help imports a plugin command, for its one-line help.
        rows += [(name, _load(name, target).get_short_help_str(limit=80)) for name, target in plugin_commands().items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


def _unavailable(name: str, why: str) -> click.Command:
    @click.command(name, help=f"Unavailable: {why}.")
    def cmd() -> None:
        raise click.UsageError(f"{name}: {why}")

    return cmd


#: Commands that never read the current directory.
_NO_CWD = frozenset({"completion"})

_CWD_GONE = (
    "the current directory no longer exists (it was removed after your shell entered it); "
    "cd to an existing directory and run it again"
)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dsh-sandbox", message=VERSION_LINE)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run commands under a sandbox policy (read-only, workspace-write, danger-full-access)."""
    # Every path a command is given relative to it, and the default workspace,
    # start from the cwd: say so once, before anything half-resolves.
    if ctx.invoked_subcommand not in _NO_CWD and not ctx.meta.get("dsh.help") and _cwd_gone():
        raise UsageError(_CWD_GONE)


def _stdout_broken(exc: OSError) -> bool:
    """Did ``exc`` come from ``click.echo`` writing our standard output
    (``| head``, ``> /dev/full``), not from another file of the command's?"""
    if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG) or sys.stdout is None:
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    stream = tb.tb_frame.f_locals.get("file") if tb is not None and tb.tb_frame.f_code is _ECHO else None
    try:
        return stream is not None and bool(stream.fileno() == sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return False


_ECHO = click.echo.__code__


def _cwd_gone() -> bool:
    import os

    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def run_main(argv: list[str] | None = None) -> Any:
    """The command line's entry: maps dsh errors onto exit codes without tracebacks.

    SIGTERM, SIGHUP and SIGINT unwind the command (its ``finally`` blocks
    kill what it started) and exit 128+N."""
    from dsh.cli.signals import Stopped, stop_on_signals

    try:
        with stop_on_signals():
            return cli.main(args=argv, prog_name="dsh-sandbox", standalone_mode=False)
    except Stopped as exc:
        click.echo(f"dsh-sandbox: {exc}; what it started was stopped", err=True)
        sys.exit(exc.exit_status)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except SandboxUnavailable as exc:
        # Not the caller's input and not the command's status: the sandbox
        # cannot be enforced here, nothing ran (``docker run`` uses 125 too).
        click.echo(f"dsh-sandbox: {exc}", err=True)
        sys.exit(125)
    except UsageError as exc:
        click.echo(f"dsh-sandbox: {exc}", err=True)
        sys.exit(2)
    except DshError as exc:
        click.echo(f"dsh-sandbox: {exc.code}: {exc}", err=True)
        sys.exit(1)
    except RuntimeError as exc:
        if str(exc) != "can't start new thread":
            raise
        # RLIMIT_NPROC counts threads: at the limit the stdlib says no more than this.
        click.echo("dsh-sandbox: cannot start a thread: this user's limit on processes and threads is reached "
                   "(ulimit -u); the run stopped, and what it had started was stopped on the way out; end "
                   "other processes of this user or raise the limit, and run it again", err=True)
        sys.exit(125)
    except FileNotFoundError:
        if not _cwd_gone():
            raise
        # Removed while the command ran: the same clear error, no traceback.
        click.echo(f"dsh-sandbox: {_CWD_GONE}", err=True)
        sys.exit(2)
    except OSError as exc:
        if not _stdout_broken(exc):
            raise
        stdout_failed(exc)
