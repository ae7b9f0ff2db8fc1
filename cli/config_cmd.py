"""``dsh-sandbox config show``: the effective settings and where each came from."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from dsh.cli.options import settings_options
from dsh.sandbox.modes import SandboxMode


@click.group("config", context_settings={"help_option_names": ["-h", "--help"]})
def config() -> None:
    """Show the configuration that run and tool call use."""


@config.command("show")
@click.option("--workspace", metavar="DIR", help="The workspace whose project config applies (default: cwd).")
@click.option("--mode", type=click.Choice([m.value for m in SandboxMode]))
@click.option("--profile", metavar="NAME|FILE")
@click.option("--runner", metavar="NAME")
@click.option("--network/--no-network", default=None)
@click.option("--approval", metavar="deny|prompt|rules:FILE")
@settings_options
@click.option("--json", "as_json", is_flag=True, help="Print the values and their sources as JSON.")
def show(workspace: str | None, as_json: bool, **flags: Any) -> None:
    """Print each setting, its value and where it came from: a flag, an
    environment variable, FILE:LINE of a config file, or the default.
    Takes the flags of run, to show what a run with them would use."""
    from dsh.cli.settings import Flags, resolve

    flags["env"] = tuple(flags["env"])
    flags["accept_degraded"] = tuple(flags["accept_degraded"])
    settings = resolve(Flags(**flags), os.environ, Path(workspace or "."), every_runner=True)
    files = {
        "user": {"path": str(settings.user_file), "found": settings.user_found},
        "project": str(settings.project_file) if settings.project_file else None,
        "project_trusted": {"value": settings.trusted.value, "source": settings.trusted.source},
    }
    rows = settings.rows()
    if as_json:
        values = [{"key": k, "value": v, "source": s} for k, v, s in rows]
        click.echo(json.dumps({"files": files, "values": values}, indent=2))
        return
    click.echo(f"user config:    {settings.user_file}" + ("" if settings.user_found else " (none)"))
    click.echo(f"project config: {settings.project_file or '(none)'}")
    click.echo(f"project trusted: {'yes' if settings.trusted.value else 'no'} ({settings.trusted.source})")
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        shown = "(unset)" if value is None else json.dumps(value) if not isinstance(value, str) else value
        click.echo(f"{key:<{width}}  {shown:<24}  {source}")
