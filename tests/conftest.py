"""Fixtures every test may use; what a test needs from the host is in
``tests.support.require``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A canonical, empty workspace directory."""
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    yield ws


@pytest.fixture
def trusted_dir() -> Iterator[Path]:
    """A directory outside every default writable root (not under /tmp or
    $TMPDIR): where a profile, rules file or fake $HOME must live to be trusted."""
    path = Path(tempfile.mkdtemp(prefix="dsh-test-", dir="/var/tmp")).resolve()
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
