"""The built-in profiles run for a normal user on a stock machine: as nobody,
with no cgroup delegated (a normal login session), ``--profile python`` and
``--profile node`` run on bwrap and (with Landlock's own gaps accepted, as any
Landlock run needs) on landlock; their memory limit becomes RLIMIT_AS per
process and the ``address-space`` limitation says so, instead of a refusal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.runners import nobody_python
from tests.support.sandboxed import need_runner

NOBODY = 65534
LANDLOCK_GAPS = ("landlock-protected-paths", "landlock-metadata", "landlock-process-escape", "landlock-process-list")
PROGRAMS = {"python": ["python3", "a.py"], "node": ["node", "-e", "console.log('hi')"]}


def nobody_cli() -> list[str]:
    made = nobody_python()
    if made is not None:
        return [made, "-P", "-m", "dsh.cli"]
    if all(os.stat(p).st_mode & 0o001 for p in Path(os.path.realpath(sys.executable)).parents):
        return [sys.executable, "-P", "-m", "dsh.cli"]
    pytest.skip("SANDBOX_UNAVAILABLE: no interpreter nobody can run (set DSH_NOBODY_PYTHON)")


@pytest.fixture
def home() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    base = Path(tempfile.mkdtemp(prefix="dsh-user-", dir="/var/tmp")).resolve()
    (base / "ws").mkdir()
    (base / "ws/a.py").write_text("print('hi')\n")
    for path in (base, base / "ws", base / "ws/a.py"):
        os.chown(path, NOBODY, NOBODY)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    return subprocess.run([*nobody_cli(), *args], cwd=home / "ws", env=env, capture_output=True, text=True,
                          timeout=240, check=False, user=NOBODY, group=NOBODY, extra_groups=[])


def no_cgroup_for_nobody(home: Path) -> None:
    """The premise: nobody has no memory cgroup here (else this proves nothing)."""
    plan = as_nobody(home, "profile", "explain", "python", "--runner", "bwrap")
    assert plan.returncode == 0, plan.stderr
    assert "RLIMIT_AS per process" in plan.stdout, plan.stdout


@pytest.mark.parametrize("profile", ["python", "node"])
def test_a_builtin_profile_runs_for_a_user_without_a_cgroup_on_bwrap(home: Path, profile: str) -> None:
    need_runner("bwrap")
    if shutil.which(PROGRAMS[profile][0], path="/usr/local/bin:/usr/bin:/bin") is None:
        pytest.skip(f"SANDBOX_UNAVAILABLE: {PROGRAMS[profile][0]} is not installed")
    no_cgroup_for_nobody(home)
    for runner in ("bwrap", "auto"):  # auto must choose bwrap, which now enforces fully
        done = as_nobody(home, "run", "--runner", runner, "--profile", profile, "--", *PROGRAMS[profile])
        assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr
        assert "SANDBOX_UNAVAILABLE" not in done.stderr


@pytest.mark.parametrize("profile", ["python", "node"])
def test_a_builtin_profile_on_landlock_adds_no_refusal_of_its_own(home: Path, profile: str) -> None:
    need_runner("landlock")
    if shutil.which(PROGRAMS[profile][0], path="/usr/local/bin:/usr/bin:/bin") is None:
        pytest.skip(f"SANDBOX_UNAVAILABLE: {PROGRAMS[profile][0]} is not installed")
    refused = as_nobody(home, "run", "--runner", "landlock", "--profile", profile, "--", "true")
    assert refused.returncode == 125
    assert "landlock-limits" not in refused.stderr and "memory" not in refused.stderr, refused.stderr
    accept = [flag for gap in LANDLOCK_GAPS for flag in ("--accept-degraded", gap)]
    done = as_nobody(home, "run", "--runner", "landlock", "--profile", profile, *accept, "--", *PROGRAMS[profile])
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr
