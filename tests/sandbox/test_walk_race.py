"""A policy path swapped back and forth with a symlink while it is walked:
each walk resolves it, refuses it as a path that keeps changing
(``SANDBOX_UNAVAILABLE``, exit 125), or refuses a link it saw stay put; a
refusal never suggests "the real path" being the raced path itself.  Real
``renameat2(RENAME_EXCHANGE)`` swaps from another process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.pins import walk

from tests.runners.pin_race import SWAPPER


@pytest.fixture
def race() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="dsh-walk-race-", dir="/var/tmp")).resolve()
    (base / "ws").mkdir()
    (base / "outside").mkdir()
    (base / "link").symlink_to(base / "outside")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_swapped_path_is_a_race_or_a_stable_link_never_itself_as_the_real_path(race: Path) -> None:
    ws = race / "ws"
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws), str(race / "link")], stdout=subprocess.PIPE)
    seen = {"resolved": 0, "raced": 0, "link": 0}
    suggested: set[str] = set()
    try:
        assert swapper.stdout is not None
        swapper.stdout.readline()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                found = walk("workspace", str(ws), ws)
            except SandboxUnavailable:
                seen["raced"] += 1
                continue
            except ConfigError as exc:
                seen["link"] += 1
                match = re.search(r"pass the real path (\S+) instead", str(exc))
                assert match is not None, str(exc)
                suggested.add(match.group(1))
                continue
            if found.pin is not None:
                os.close(found.pin.fd)
            seen["resolved"] += 1
    finally:
        swapper.kill()
        swapper.wait()
    assert seen["raced"] >= 1, seen  # the race is real
    # A suggestion names where the link pointed, never the path being swapped.
    assert suggested <= {str(race / "outside")}, (suggested, seen)
