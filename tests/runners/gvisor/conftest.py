"""Fixtures of the gVisor runner tests: one runner per module (one warm sandbox per shape)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.gvisor import GvisorRunner

from tests.support.require import require_runner


@pytest.fixture(scope="module")
def runner() -> Iterator[GvisorRunner]:
    instance = GvisorRunner()
    require_runner("gvisor", instance)
    yield instance
    instance.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = Path(os.path.realpath(tmp_path)) / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("original\n")
    return root
