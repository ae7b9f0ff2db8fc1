"""Flags shared by ``run``, ``tool call`` and ``config show`` (the settings the
config files can also hold; ``dsh.cli.settings`` merges them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from dsh.sandbox.lazy_pattern import LazyPattern

_DECIMAL = LazyPattern(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def seconds_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A duration in seconds, written as digits with an optional decimal point
    (``30``, ``0.5``).  Python's ``float`` would also take ``1e-400`` (0),
    ``inf`` and other scripts' digits: a flag that sets a deadline or a
    lifetime takes what a reader sees as the number.  The range is checked
    where the value is used."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and _DECIMAL.fullmatch(text)):
        source = ""
        if param.name and ctx.get_parameter_source(param.name) is click.core.ParameterSource.ENVIRONMENT:
            source = f" (from {param.envvar})"
        raise click.BadParameter(f"{value!r}{source} is not a number of seconds: write digits with an optional "
                                 "decimal point, e.g. 30 or 0.5", ctx, param)
    return float(text)


def _env_pair(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    from dsh.cli.config_files import env_problem

    pairs: list[tuple[str, str]] = []
    for raw in values:
        name, sep, value = raw.partition("=")
        if not sep:
            raise click.BadParameter(f"{raw!r}: write NAME=VALUE (e.g. --env NODE_ENV=test)", ctx, param)
        problem = env_problem(name, value)
        if problem is not None:
            raise click.BadParameter(f"{problem[0]}; {problem[1]}", ctx, param)
        pairs.append((name, value))
    return tuple(pairs)


def _non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("empty; name an image (e.g. dsh-sandbox/runtime:latest) or drop the flag", ctx, param)
    return value


def _hosts(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    from dsh.sandbox.errors import ConfigError
    from dsh.sandbox.net_rules import normalised_entry

    for raw in values:
        try:
            normalised_entry(f"--{param.name.replace('_', '-') if param.name else 'host'}", raw)
        except ConfigError as exc:
            raise click.BadParameter(str(exc).partition(": ")[2], ctx, param) from None
    return tuple(values)


def host_flags() -> list[Callable[[Any], Any]]:
    """The hosts a command may reach (``run``, ``shell``, ``tool``, ``mcp``)."""
    return [
        click.option("--allow-domain", "allow_domain", multiple=True, metavar="HOST", callback=_hosts,
                     help="Let the command reach HOST (a name, *.example.com or an IP) and nothing else "
                     "but other allowed hosts, through a proxy on the host (repeatable; bwrap, docker "
                     "and gVisor as root enforce it)."),
        click.option("--deny-domain", "deny_domain", multiple=True, metavar="HOST", callback=_hosts,
                     help="Refuse HOST even when an allowed entry covers it (repeatable)."),
    ]


def network_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--network/--no-network`` and the hosts a run may reach (``run``, ``shell``)."""
    for option in reversed([
        click.option("--network/--no-network", default=None,
                      help="Turn the whole network on or off (default: the profile's)."),
        *host_flags(),
    ]):
        fn = option(fn)
    return fn


def settings_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(settings_flags()):
        fn = option(fn)
    return fn


def settings_flags() -> list[Callable[[Any], Any]]:
    return [
        click.option(
            "--env", "env", multiple=True, metavar="NAME=VALUE", callback=_env_pair,
            help="Set a variable for the command (repeatable). Credential-shaped names "
            "(*KEY*, *TOKEN*, *SECRET*, *PASSWORD*) reach the command only this way.",
        ),
        click.option("--image", metavar="IMAGE", callback=_non_empty,
                     help="The image of the chosen runner, for a runner that runs commands in an image "
                     "(dsh-sandbox config show lists runners.NAME.image)."),
        click.option("--accept-degraded", "accept_degraded", multiple=True, metavar="NAME",
                     help="Accept this named degradation of the runner (repeatable); see dsh-sandbox runners."),
        click.option("--trust-project", is_flag=True,
                     help="Let .dsh/config.toml of this project weaken the sandbox (wider mode, network...)."),
    ]


def keep_spill_files() -> Any:
    """The subprocess service entry of a CLI session whose output names spill
    files (``full output: PATH``): they must outlive the session."""
    from dsh.sandbox.context import CompositionEntry

    return CompositionEntry("subprocess", "subprocess-local", {"keep_spill_files": True})
