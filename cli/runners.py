"""``dsh-sandbox runners``: every runner, available or not and why, and what it
enforces per mode here.

The enforcement columns use the policy ``run`` would use in this directory for
each mode (the mode's built-in profile, or ``--profile``): ``full``,
``partial: ...`` (accepted by the profile), ``refused: ...`` (``run`` fails
closed), ``unwrapped`` for danger-full-access (no runner is used), ``n/a`` when
the policy itself cannot be built here (the reason is printed below the table),
or ``-`` when the runner is not available.  ``--prune`` removes leftover
Docker containers of crashed sessions (``--all``: every dsh-sandbox container).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import click
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.gate import summarize
from dsh.sandbox.modes import SandboxMode


@click.command("runners", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--profile", metavar="NAME|FILE", help="Profile for the enforcement columns.")
@click.option("--workspace", metavar="DIR", help="Workspace for the enforcement columns.")
@click.option("--prune", is_flag=True, help="Remove what runners left behind (Docker containers, Landlock CA bundles).")
@click.option("--all", "prune_all", is_flag=True, help="With --prune: also live sessions' ones.")
def runners(
    as_json: bool, profile: str | None, workspace: str | None, prune: bool, prune_all: bool
) -> None:
    """List runners: available or not, and what they enforce."""
    if prune_all and not prune:
        raise click.UsageError("--all only goes with --prune: dsh-sandbox runners --prune --all")
    if prune:
        _prune(prune_all, as_json)
        return
    rows, notes = collect(profile=profile, workspace=workspace)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _print_table(rows)
    for note in notes:
        click.echo(f"note: {note}")


def collect(*, profile: str | None, workspace: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per runner (JSON-able), and notes about policies that cannot be built."""
    from dsh.sandbox.host import SandboxHost
    from dsh.sandbox.policy_service import PolicyService
    from dsh.sandbox.session import SessionSpec, build_session, host_only

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    policies: dict[SandboxMode, Any] = {}
    with contextlib.ExitStack() as stack:
        # Each policy's session stays open to the end: its private /tmp goes with it.
        for mode in SandboxMode:
            if not mode.constrains:
                continue
            try:
                session = stack.enter_context(
                    build_session(SessionSpec(mode=mode.value, profile=profile, workspace=workspace)))
                policies[mode] = session.require(PolicyService).default_policy
            except ConfigError as exc:
                policies[mode] = None
                notes.append(f"{mode}: {exc}")
        ctx = stack.enter_context(build_session(host_only()))
        host = ctx.require(SandboxHost)
        for probe in host.probe_all():
            runner = host.runner(probe.name) if probe.available else None
            enforcement: dict[str, str] = {}
            for mode in SandboxMode:
                if not mode.constrains:
                    enforcement[mode.value] = "unwrapped"
                elif runner is None:
                    enforcement[mode.value] = "-"
                elif policies[mode] is None:
                    enforcement[mode.value] = "n/a"
                else:
                    enforcement[mode.value] = _enforcement(runner, policies[mode])
            rows.append(
                {
                    "name": probe.name,
                    "available": probe.available,
                    "reason": probe.reason,
                    "version": probe.version,
                    "details": {k: _plain(v) for k, v in dict(probe.details).items()},
                    "enforcement": enforcement,
                }
            )
    return rows, notes


def _enforcement(runner: Any, policy: Any) -> str:
    try:
        enforcement = runner.enforcement(policy)
    except SandboxUnavailable as exc:
        return f"refused: {exc.reason}"
    except Exception as exc:  # a runner that cannot say what it enforces is refused
        return f"refused: {type(exc).__name__}: {exc}"
    if enforcement.accepted_by(policy):
        return str(enforcement.describe())
    return "refused: " + "; ".join(summarize(enforcement.missing))


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _print_table(rows: list[dict[str, Any]]) -> None:
    """A table with one short cell per mode, then the long reasons below it."""
    modes = [m.value for m in SandboxMode]
    header = ["RUNNER", "STATUS", "VERSION", *modes]
    table = [header]
    unavailable: list[str] = []
    details: list[str] = []
    for row in rows:
        cells = [
            row["name"],
            "available" if row["available"] else "unavailable",
            row["version"] or "-",
        ]
        for mode in modes:
            value: str = row["enforcement"][mode]
            short, _, rest = value.partition(": ")
            cells.append(short)
            if rest:
                details.append(f"{row['name']} {mode}: {value}")
        table.append(cells)
        if not row["available"]:
            unavailable.append(f"{row['name']}: unavailable: {row['reason']}")
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    if unavailable or details:
        click.echo("")
        for line in unavailable + details:
            click.echo(line)


def _prune(prune_all: bool, as_json: bool) -> None:
    from dsh.sandbox.registry import runner_classes

    names: list[str] = []
    for cls in runner_classes().values():
        names += cls.prune(everything=prune_all) or []
    if as_json:
        click.echo(json.dumps({"removed": names}))
        return
    click.echo(f"removed {len(names)} leftover(s)")
    for name in names:
        click.echo(f"  {name}")
