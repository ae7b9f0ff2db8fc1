"""Which host programs the conformance scenarios need: listed by the CLI and the README."""

from __future__ import annotations

import re
from pathlib import Path

from dsh.cli.conformance.catalog import SCENARIOS

from tests.support.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def test_list_names_what_each_scenario_needs() -> None:
    done = cli("conformance", "--list")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.decode().splitlines() if line.strip()}
    needing = [s for s in SCENARIOS if s.requires]
    assert needing, "the catalog has scenarios that need host programs"
    for scenario in needing:
        assert f"(needs {', '.join(scenario.requires)})" in lines[scenario.id], lines[scenario.id]


def test_readme_names_every_program_a_scenario_needs() -> None:
    section = README.read_text().split("## Conformance", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z0-9]+)`", section))
    needed = {tool for s in SCENARIOS for tool in s.requires}
    assert needed <= named, f"README's Conformance section misses {sorted(needed - named)}"
