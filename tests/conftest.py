"""Shared test helpers.

``require_runner(name)`` probes a runner and skips with its
``SANDBOX_UNAVAILABLE`` reason when it is missing.  CI sets
``DSH_REQUIRE_RUNNERS`` (e.g. ``landlock,bwrap,docker,e2b``): for those runners a
missing runner *fails* the test instead, so a runner CI has can never pass by
skipping.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from dsh.sandbox.runner import Runner, RunnerProbe

RUNNER_GROUP = "dsh_sandbox.runners"


def required_runners() -> set[str]:
    raw = os.environ.get("DSH_REQUIRE_RUNNERS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def load_runner_class(name: str) -> type[Runner]:
    for ep in metadata.entry_points(group=RUNNER_GROUP):
        if ep.name == name:
            cls: type[Runner] = ep.load()
            return cls
    raise LookupError(f"no runner named {name!r} is registered")


def require_runner(name: str, runner: Runner | None = None) -> RunnerProbe:
    """Probe ``name``; skip (or fail, if CI requires it) when unavailable."""
    instance = runner if runner is not None else load_runner_class(name)()
    probe = instance.probe()
    if not probe.available:
        message = f"SANDBOX_UNAVAILABLE: {name}: {probe.reason}"
        if name in required_runners():
            pytest.fail(f"{message} (required by DSH_REQUIRE_RUNNERS)")
        pytest.skip(message)
    return probe


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
