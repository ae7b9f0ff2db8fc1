"""``dsh-sandbox conformance``: prove each runner holds the modes on this machine."""

from __future__ import annotations

import json
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import click
from dsh.cli.conformance.model import MODES, ScenarioResult
from dsh.sandbox.errors import ConfigError

MARK = {"pass": ".", "fail": "F", "not-enforced": "n", "unavailable": "u"}


def _runner_options(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    p = Path(path)
    try:
        text = p.read_text()
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--runner-options {path}: cannot read: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(f"--runner-options {path}: expected a table per runner, e.g. {{\"docker\": {{...}}}}")
    return data


@click.command("conformance")
@click.option("--runner", "runners", multiple=True, default=("all",), show_default=True,
              help="Runner to test (repeatable), or 'all'.")
@click.option("--mode", "modes", multiple=True, type=click.Choice(MODES), help="Mode (repeatable; default both).")
@click.option("--scenario", "scenario_ids", multiple=True, help="Scenario id (repeatable; default all).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write results as JSON here.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--runner-options", "options_path", type=click.Path(dir_okay=False),
              help="TOML/JSON file of per-runner options (e.g. docker image, e2b sandbox_url).")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def conformance(runners: tuple[str, ...], modes: tuple[str, ...], scenario_ids: tuple[str, ...],
                json_path: str | None, junit_path: str | None, options_path: str | None, list_only: bool) -> None:
    """Run the scenario catalog per runner and mode; exit 1 on any fail.

    Prints a runner x mode matrix of pass / fail / not-enforced (with the
    runner's stated reason) / unavailable.
    """
    from dsh.cli.conformance.catalog import SCENARIOS, by_id
    from dsh.cli.conformance.harness import Harness
    from dsh.cli.conformance.report import details, failed, matrix, write_json, write_junit

    if list_only:
        for s in SCENARIOS:
            needs = f"  (needs {', '.join(s.requires)})" if s.requires else ""
            click.echo(f"{s.id:28} {s.family:12} {s.purpose}{needs}")
        return
    catalog = by_id()
    unknown = [s for s in scenario_ids if s not in catalog]
    if unknown:
        raise click.UsageError(f"--scenario: unknown id(s) {', '.join(unknown)}; see --list")
    chosen = [catalog[s] for s in scenario_ids] if scenario_ids else list(SCENARIOS)
    from dsh.sandbox.registry import known_runner_names

    registered = known_runner_names()
    names = registered if "all" in runners else list(dict.fromkeys(runners))
    bad = [r for r in names if r not in registered]
    if bad:
        raise click.UsageError(f"--runner: unknown runner(s) {', '.join(bad)}; use {', '.join(registered)} or all")
    options = _runner_options(options_path)

    current: list[str] = []
    started = [time.monotonic()]

    def end_line() -> None:
        # Each cell's time, so a slow runner shows where CI's minutes go.
        sys.stderr.write(f" {time.monotonic() - started[0]:.0f} s\n")
        started[0] = time.monotonic()

    def progress(r: ScenarioResult) -> None:
        key = f"{r.runner}/{r.mode}"
        if not current or current[0] != key:
            if current:
                end_line()
            current[:] = [key]
            sys.stderr.write(f"{key:32} ")
        sys.stderr.write(MARK[r.outcome])
        sys.stderr.flush()

    harness = Harness(runner_options=options, progress=progress)
    cells = harness.run(names, modes or MODES, chosen)
    if current:
        end_line()
    click.echo(matrix(cells))
    text = details(cells)
    if text:
        click.echo("")
        click.echo(text)
    try:
        if json_path:
            write_json(cells, Path(json_path))
        if junit_path:
            write_junit(cells, Path(junit_path))
    except OSError as exc:
        raise ConfigError(f"cannot write the report {exc.filename}: {exc.strerror}") from None
    if failed(cells):
        sys.exit(1)
