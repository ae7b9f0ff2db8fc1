"""``dsh-sandbox shell``: an interactive bash in the workspace, on a pty inside the sandbox.

The same session as ``run -t -- bash -i``: same policy, profile, runner and
configuration files; only the command is fixed.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from dsh.cli.options import network_options, settings_options
from dsh.sandbox.modes import SandboxMode


@click.command("shell", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--mode", type=click.Choice([m.value for m in SandboxMode]),
              help="Sandbox mode (default: the profile's, else workspace-write).")
@click.option("--profile", metavar="NAME|FILE", help="Built-in profile name or a profile file.")
@click.option("--runner", metavar="auto|NAME", help="Runner that enforces the policy (default: auto).")
@click.option("--workspace", metavar="DIR", help="Workspace root (default: the current directory).")
@click.option("--writable", multiple=True, metavar="PATH", help="Extra writable root (repeatable).")
@network_options
@settings_options
def shell(**params: Any) -> None:
    """Open an interactive bash under a sandbox policy (needs a terminal).

    \b
    dsh-sandbox shell                    # workspace-write on the current directory
    dsh-sandbox shell --profile python   # a profile's policy

    Exit status: the shell's, as with dsh-sandbox run.
    """
    from dsh.cli.run import run_command
    from dsh.cli.run_options import RunOptions

    many = ("writable", "env", "accept_degraded", "allow_domain", "deny_domain")
    fields: dict[str, Any] = {k: (tuple(v) if k in many else v) for k, v in params.items()}
    opts = RunOptions(**fields, argv=("bash", "-i"), tty=True)
    code = run_command(opts)
    sys.stdout.flush()
    raise SystemExit(code)
