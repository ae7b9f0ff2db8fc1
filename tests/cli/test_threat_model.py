"""The threat model and the conformance catalog name each other: no row without proof.

Every row of the resources table in docs/threat-model.md must name at least one
conformance scenario or test, every scenario it names must exist in the
catalog, and every test it names must exist in the tree.  A new escape class
therefore lands as a row with the scenario that proves it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from dsh.cli.conformance.catalog import SCENARIOS, by_id

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "threat-model.md"
RUNNERS = ("landlock", "bwrap", "docker", "gvisor", "e2b", "seatbelt")


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the first table under '## Resources'."""
    section = text.split("## Resources", 1)[1]
    lines = [ln.strip() for ln in section.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    rows = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        rows.append([cell.strip() for cell in ln.strip("|").split("|")])
    header, body = rows[0], [r for r in rows[2:]]
    return header, body


def parse(text: str) -> list[tuple[str, list[str]]]:
    """(resource, ids) per row; ids are the backquoted names of the last column."""
    header, body = _table(text)
    assert header[0] == "resource" and header[-1] == "scenarios", header
    assert all(r in header for r in RUNNERS), f"a column per runner: {header}"
    out = []
    for row in body:
        assert len(row) == len(header), f"row {row[0]!r} has {len(row)} cells, expected {len(header)}"
        assert all(row[1:-1]), f"row {row[0]!r} leaves a runner's cell empty"
        out.append((row[0], re.findall(r"`([^`]+)`", row[-1])))
    return out


def missing(rows: list[tuple[str, list[str]]], scenario_ids: set[str], root: Path) -> list[str]:
    """Every problem: rows without proof, unknown scenario ids, unknown tests."""
    problems = []
    for resource, ids in rows:
        if not ids:
            problems.append(f"{resource!r}: names no scenario or test")
        for ident in ids:
            if "::" in ident:
                path, _, name = ident.partition("::")
                file = root / path
                defined = file.is_file() and name in {
                    node.name for node in ast.walk(ast.parse(file.read_text()))
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
                if not defined:
                    problems.append(f"{resource!r}: test {ident} does not exist")
            elif ident not in scenario_ids:
                problems.append(f"{resource!r}: scenario {ident!r} is not in the catalog")
    return problems


def test_every_row_is_proven_by_existing_scenarios_or_tests() -> None:
    rows = parse(DOC.read_text())
    assert len(rows) > 30
    assert missing(rows, set(by_id()), ROOT) == []


def test_scenario_ids_are_unique() -> None:
    ids = [s.id for s in SCENARIOS]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_every_attack_scenario_is_in_the_threat_model() -> None:
    """The other direction: a blocked scenario no row mentions is an unexplained threat."""
    named = {i for _, ids in parse(DOC.read_text()) for i in ids}
    attacks = {s.id for s in SCENARIOS if "blocked" in s.expect.values()}
    assert sorted(attacks - named) == []


@pytest.mark.parametrize("row, problem", [
    ("| a thing | x | x | x | x | x | x |  |", "names no scenario or test"),
    ("| a thing | x | x | x | x | x | x | `no-such-scenario` |", "is not in the catalog"),
    ("| a thing | x | x | x | x | x | x | `tests/cli/test_threat_model.py::test_nope` |", "does not exist"),
])
def test_the_check_catches_a_bad_row(row: str, problem: str) -> None:
    doc = ("## Resources\n\n| resource | landlock | bwrap | docker | gvisor | e2b | seatbelt | scenarios |\n"
           "|---|---|---|---|---|---|---|---|\n" + row + "\n")
    found = missing(parse(doc), set(by_id()), ROOT)
    assert len(found) == 1 and problem in found[0], found


def test_a_good_row_passes() -> None:
    doc = ("## Resources\n\n| resource | landlock | bwrap | docker | gvisor | e2b | seatbelt | scenarios |\n"
           "|---|---|---|---|---|---|---|---|\n| t | x | x | x | x | x | x | `pos-true` "
           "`tests/cli/test_threat_model.py::test_a_good_row_passes` |\n")
    assert missing(parse(doc), set(by_id()), ROOT) == []
