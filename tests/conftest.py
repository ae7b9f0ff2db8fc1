"""Fixtures every test may use; what a test needs from the host is in
``tests.support.require``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _sandbox_homes_in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every policy makes a per-workspace sandbox HOME under $XDG_CACHE_HOME: the
    test workspaces' homes go to a scratch directory, not the tester's ~/.cache."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache").resolve())
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


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
