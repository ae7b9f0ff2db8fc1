"""``dsh-sandbox profile list|show|validate|explain``.

``explain`` resolves the profile into the canonical policy for a workspace (the
current directory by default), picks the runner the way ``run`` would
(``--runner auto`` by default) and prints what that runner will enforce (its
rules or mounts, network, limits) and what it cannot, with the reasons.  It
exits 1 when ``run`` would refuse the policy with that runner (fail closed),
so scripts can check a profile before using it.
"""

from __future__ import annotations

import json
from typing import Any

import click
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode


@click.group("profile", context_settings={"help_option_names": ["-h", "--help"]})
def profile() -> None:
    """List, show, validate and explain profiles."""


@profile.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_cmd(as_json: bool) -> None:
    """List the built-in profiles, then yours (~/.config/dsh-sandbox/profiles/NAME.toml)."""
    from dsh.sandbox.errors import ConfigError
    from dsh.sandbox.profiles import list_profiles, load_profile, user_profile_dir

    profiles = list_profiles()
    mine: list[Any] = []
    broken: list[tuple[str, str]] = []
    directory = user_profile_dir()
    names = sorted(p.stem for p in directory.glob("*.toml")) if directory.is_dir() else []
    for name in names:
        try:
            mine.append(load_profile(name))
        except ConfigError as exc:  # a clash with a built-in, or an invalid file: say so, list the rest
            broken.append((name, str(exc)))
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in (*profiles, *mine)], indent=2))
        return
    width = max((len(p.name) for p in (*profiles, *mine)), default=4)
    for p in (*profiles, *mine):
        mode = p.mode.value if p.mode else "(default)"
        where = "" if p.builtin else f"  ({p.source})"
        click.echo(f"{p.name:<{width}}  {mode:<18}  {p.description}{where}")
    for name, why in broken:
        click.echo(f"{name:<{width}}  (not usable)        {why}")


@profile.command("show")
@click.argument("name", metavar="PROFILE")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def show_cmd(name: str, as_json: bool) -> None:
    """Show a profile (built-in name or file) with its `extends` chain merged."""
    from dsh.sandbox.profiles import load_profile

    data = load_profile(name).to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        click.echo(f"{key}: {_show(value)}")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        parts = [f"{k}={v}" for k, v in value.items() if v is not None]
        return ", ".join(parts) or "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return "none" if value is None or value == "" else str(value)


@profile.command("validate")
@click.argument("name", metavar="PROFILE")
@click.option("--mode", type=click.Choice([m.value for m in SandboxMode]), help="Override the mode.")
@click.option("--workspace", metavar="DIR", help="Workspace root (default: the current directory).")
def validate_cmd(name: str, mode: str | None, workspace: str | None) -> None:
    """Validate a profile as `run --profile PROFILE` would use it here.

    Errors name the line and the fix.  Beyond the file itself this resolves
    the policy for the workspace (roots, dangerous directories, symlinks,
    degradation names) and refuses a profile file a sandboxed command could
    rewrite, so "ok" means `run` accepts it.
    """
    from dsh.sandbox.config_trust import refuse_untrusted_config
    from dsh.sandbox.errors import ConfigError
    from dsh.sandbox.input_files import check_path
    from dsh.sandbox.policy_service import PolicyService
    from dsh.sandbox.session import SessionSpec, build_session

    if workspace is not None:
        check_path("--workspace", workspace, "pass a shorter path")
    # Errors are UsageErrors: printed with their line and fix, exit 2.
    try:
        with build_session(SessionSpec(mode=mode, profile=name, workspace=workspace)) as ctx:
            service = ctx.require(PolicyService)
            service.resolve()
            refuse_untrusted_config(ctx, None)
            loaded = service.profile
    except ConfigError as exc:
        raise _with_line(exc, name) from None
    shown = loaded.mode.value if loaded.mode else "the default mode"
    chain = f" (extends {' -> '.join(loaded.chain[1:])})" if len(loaded.chain) > 1 else ""
    click.echo(f"ok: {loaded.source}: profile {loaded.name}, {shown}{chain}")


def _with_line(exc: Any, name: str) -> Any:
    """A policy error about a profile key ("profile p: writable_roots entry
    '/etc': ...") with the file and line that set it, when they can be found;
    each of several errors (every refused root) gets its own."""
    from dsh.sandbox.errors import ConfigErrors

    if isinstance(exc, ConfigErrors):
        return ConfigErrors(tuple(_with_line(one, name) for one in exc.errors))
    return _one_with_line(exc, name)


def _one_with_line(exc: Any, name: str) -> Any:
    import re

    from dsh.sandbox.errors import ConfigError
    from dsh.sandbox.profile_schema import TOP_KEYS, ProfileError
    from dsh.sandbox.profiles import load_profile
    from dsh.sandbox.toml_lines import find_key_line

    if isinstance(exc, ProfileError) and exc.line is not None:
        return exc
    found = re.match(r"profile [^:]+: (\w+)\b(?: entry ('[^']*'|\"[^\"]*\"))?", str(exc))
    if found is None or found.group(1) not in TOP_KEYS:
        return exc
    key = found.group(1)
    try:
        sources = load_profile(name).sources
    except ProfileError:
        return exc
    for source in sources:
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        line = find_key_line(text, key)
        if line is None:
            continue
        if found.group(2) is not None:
            # A list over several lines: the line of the entry itself.
            entry = found.group(2)[1:-1]
            lines = text.splitlines()
            line = next((n for n in range(line, len(lines) + 1) if f'"{entry}"' in lines[n - 1]
                         or f"'{entry}'" in lines[n - 1]), line)
        return ConfigError(f"{source}:{line}: {exc}")
    return exc


@profile.command("explain")
@click.argument("name", metavar="PROFILE")
@click.option("--runner", default="auto", show_default=True, help="The runner to explain.")
@click.option("--mode", type=click.Choice([m.value for m in SandboxMode]), help="Override the mode.")
@click.option("--workspace", metavar="DIR", help="Workspace root (default: the current directory).")
def explain_cmd(name: str, runner: str, mode: str | None, workspace: str | None) -> None:
    """Explain what a runner will enforce for a profile, and what it cannot."""
    from dsh.cli.policy_text import describe_policy
    from dsh.sandbox.host import SandboxHost
    from dsh.sandbox.input_files import check_path
    from dsh.sandbox.policy_service import PolicyService
    from dsh.sandbox.registry import check_runner_name
    from dsh.sandbox.session import SessionSpec, build_session

    check_runner_name(runner)
    if workspace is not None:
        check_path("--workspace", workspace, "pass a shorter path")
    with build_session(SessionSpec(mode=mode, profile=name, workspace=workspace, runner=runner)) as ctx:
        policy = ctx.require(PolicyService).default_policy
        click.echo("policy:")
        for line in describe_policy(policy):
            click.echo(f"  {line}")
        if not policy.constrained:
            click.echo("runner: none; danger-full-access runs the command unwrapped")
            return
        refused = _explain_runner(ctx.require(SandboxHost), policy)
    if refused:
        raise SystemExit(1)


def _explain_runner(host: Any, policy: Any) -> bool:
    """Print the chosen runner's plan; True when ``run`` would refuse."""
    try:
        selection = host.choose(policy)
    except SandboxUnavailable as exc:
        click.echo(f"runner: {host.runner_name}: REFUSED (fail closed): {exc.reason}")
        chosen = host.runner(host.runner_name) if host.runner_name != "auto" else None
        if chosen is not None:
            _print_plan(chosen.explain(policy), title="what it would enforce")
        return True
    runner, enforcement = selection.runner, selection.enforcement
    probe = host.probe(runner.name)
    version = f" ({probe.version})" if probe.version else ""
    click.echo(f"runner: {runner.name}{version}")
    click.echo(f"enforcement: {enforcement.describe()}")
    if enforcement.degradations:
        click.echo(f"accepted degradations: {', '.join(enforcement.degradations)}")
    _print_plan(runner.explain(policy), title="enforced")
    return False


def _print_plan(plan: Any, *, title: str) -> None:
    click.echo(f"{title}:")
    for rule in plan.rules:
        click.echo(f"  {rule}")
    click.echo(f"network: {plan.network}")
    click.echo("limits: " + ("; ".join(plan.limits) or "none"))
    if plan.cannot:
        click.echo("cannot enforce:")
        for item in plan.cannot:
            click.echo(f"  {item}")
    else:
        click.echo("cannot enforce: nothing")
