"""Runner names live in the runners' own packages and the entry points, nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES = re.compile(r"[\"'](landlock|bwrap|docker|gvisor|e2b|seatbelt)[\"']")


def test_no_runner_name_is_written_outside_its_package() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in ("cli", "sandbox", "executors", "tools")
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if NAMES.search(line)
    ]
    assert found == []
