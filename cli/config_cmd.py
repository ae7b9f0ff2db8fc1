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
    Takes the flags of run, to show what a run with them would use.

    A project file that would weaken the sandbox is shown, not refused: the
    values it may not set are listed as not applied, with the reason (run
    refuses such a file until you remove them or trust the project)."""
    from dsh.cli.settings import Flags, resolve

    flags["env"] = tuple(flags["env"])
    flags["accept_degraded"] = tuple(flags["accept_degraded"])
    settings = resolve(Flags(**flags), os.environ, Path(workspace or "."), every_runner=True, keep_refused=True)
    files = {
        "user": {"path": str(settings.user_file), "found": settings.user_found},
        "project": str(settings.project_file) if settings.project_file else None,
        "project_trusted": {"value": settings.trusted.value, "source": settings.trusted.source},
    }
    rows = [(key, *_effective(key, value, source, settings)) for key, value, source in settings.rows()]
    refused = [{"key": r.key, "value": r.value, "source": r.where, "why": r.why} for r in settings.refused]
    if as_json:
        values = [{"key": k, "value": v, "source": s, **_effective_json(e)} for k, v, s, e in rows]
        click.echo(json.dumps({"files": files, "values": values, "refused": refused}, indent=2))
        return
    click.echo(f"user config:    {settings.user_file}" + ("" if settings.user_found else " (none)"))
    click.echo(f"project config: {settings.project_file or '(none)'}")
    click.echo(f"project trusted: {'yes' if settings.trusted.value else 'no'} ({settings.trusted.source})")
    width = max(len(k) for k, *_ in rows)
    for key, value, source, effective in rows:
        shown = effective if value is None and effective is not None else _shown(value)
        click.echo(f"{key:<{width}}  {shown:<24}  {source}")
    if refused:
        click.echo(f"refused (not applied; run exits 2 on this project file until you remove them, or "
                   f"trust the project: --trust-project or trusted_projects in {settings.user_file}):")
        for item in settings.refused:
            click.echo(f"  {item.key} = {_shown(item.value)}  {item.where}: would weaken the sandbox ({item.why})")


def _effective_json(text: str | None) -> dict[str, Any]:
    """``{"effective": VALUE, "effective_because": WHY}`` from ``"VALUE (WHY)"``."""
    if text is None:
        return {}
    value, _, why = text.partition(" (")
    shown: Any = json.loads(value) if value in ("true", "false") else value
    return {"effective": shown, "effective_because": why.rstrip(")")}


def _shown(value: Any) -> str:
    return "(unset)" if value is None else value if isinstance(value, str) else json.dumps(value)


def _effective(key: str, value: Any, source: str, settings: Any) -> tuple[Any, str, str | None]:
    """(value, source, what applies when unset): an unset mode is the profile's,
    else workspace-write; an unset profile is the mode's built-in one."""
    if value is not None:
        return value, source, None
    if key in ("mode", "profile", "network"):
        profile = _profile(settings)
        chosen = settings["profile"] is not None and profile is not None and profile.mode is not None
        mode = settings["mode"] or (profile.mode.value if chosen else None)
        if key == "mode":
            if mode is not None:
                return value, source, f"{mode} (profile {settings['profile']})"
            return value, source, f"{SandboxMode.WORKSPACE_WRITE.value} (default)"
        if key == "profile":
            return value, source, f"{mode or SandboxMode.WORKSPACE_WRITE.value} (default: the mode's built-in)"
        if profile is not None and profile.network_allowlist is not None:
            hosts = ", ".join(profile.network_allowlist.allow) or "no host"
            return value, source, f"allowlist: {hosts} (profile {profile.name})"
        if profile is not None and profile.network is not None:
            return value, source, f"{json.dumps(profile.network)} (profile {profile.name})"
        return value, source, "false (default: off in read-only and workspace-write)"
    if key == "approval":
        return value, source, "deny (default)"
    if key.startswith("runners."):
        return value, source, "(the runner's default)"
    return value, source, None


def _profile(settings: Any) -> Any:
    """The profile in effect, when it can be loaded (a broken one is run's to report)."""
    from dsh.sandbox.errors import ConfigError
    from dsh.sandbox.profiles import load_profile

    name = settings["profile"] or settings["mode"] or SandboxMode.WORKSPACE_WRITE.value
    try:
        return load_profile(os.path.expanduser(str(name)))
    except ConfigError:
        return None
