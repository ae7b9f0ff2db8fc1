"""Conformance reports: the runner x mode matrix, JSON and JUnit XML."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dsh.cli.conformance.harness import Cell
from dsh.cli.conformance.model import MODES

OUTCOMES = ("pass", "fail", "not-enforced", "unavailable")


def cell_summary(cell: Cell) -> str:
    parts = [f"{cell.count(o)} {o}" for o in OUTCOMES if cell.count(o)]
    return ", ".join(parts) or "no scenarios"


def matrix(cells: Sequence[Cell]) -> str:
    runners = list(dict.fromkeys(c.runner for c in cells))
    modes = [m for m in MODES if any(c.mode == m for c in cells)]
    by_key = {(c.runner, c.mode): c for c in cells}
    rows = [["runner", *modes]]
    for r in runners:
        rows.append([r, *[cell_summary(by_key[(r, m)]) if (r, m) in by_key else "-" for m in modes]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def details(cells: Sequence[Cell]) -> str:
    """Every fail, then every not-enforced and unavailable reason (deduplicated)."""
    out: list[str] = []
    for outcome in ("fail", "not-enforced", "unavailable"):
        seen: set[tuple[str, str, str]] = set()
        for cell in cells:
            for r in cell.results:
                if r.outcome != outcome:
                    continue
                key = (r.runner, r.scenario if outcome == "fail" else "", r.detail)
                if key in seen:
                    continue
                seen.add(key)
                scope = f"{r.runner}/{r.mode}/{r.scenario}"
                out.append(f"{outcome.upper():13} {scope}: {r.detail}")
    return "\n".join(out)


def failed(cells: Sequence[Cell]) -> bool:
    return any(c.count("fail") for c in cells)


def write_json(cells: Sequence[Cell], path: Path) -> None:
    payload = {
        "machine": {"kernel": platform.release(), "arch": platform.machine()},
        "cells": [
            {"runner": c.runner, "mode": c.mode, "note": c.note,
             "counts": {o: c.count(o) for o in OUTCOMES},
             "results": [asdict(r) for r in c.results]}
            for c in cells
        ],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def write_junit(cells: Sequence[Cell], path: Path) -> None:
    suites = ET.Element("testsuites", name="dsh-sandbox conformance")
    for cell in cells:
        suite = ET.SubElement(
            suites, "testsuite", name=f"{cell.runner}.{cell.mode}", tests=str(len(cell.results)),
            failures=str(cell.count("fail")),
            skipped=str(cell.count("not-enforced") + cell.count("unavailable")),
        )
        for r in cell.results:
            case = ET.SubElement(suite, "testcase", classname=f"{r.runner}.{r.mode}", name=r.scenario,
                                 time=f"{r.elapsed_s:.3f}")
            if r.outcome == "fail":
                ET.SubElement(case, "failure", message=r.detail)
            elif r.outcome != "pass":
                ET.SubElement(case, "skipped", message=f"{r.outcome}: {r.detail}")
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
