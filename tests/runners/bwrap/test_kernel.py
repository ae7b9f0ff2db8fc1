"""Kernel interfaces from inside bwrap: no writable tunable, no capability, leaks masked.

Run as root these are the tests that matter (root keeps host uid 0 inside);
as an unprivileged user they document that nothing changes for them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.bwrap.helpers import BOTH_MODES, Layout, policy, run
from tests.runners.kernel_probe import KERNEL_TREES, WRITE_PROBE

PY = sys.executable

#: A host-global sysctl whose value is harmless to flip for a moment.
CANARY = Path("/proc/sys/kernel/core_uses_pid")


@pytest.fixture
def canary() -> Iterator[str]:
    before = CANARY.read_text()
    yield before
    if CANARY.read_text() != before and os.geteuid() == 0:
        CANARY.write_text(before)  # a failing run changed the host: put it back


@BOTH_MODES
def test_no_kernel_tunable_is_writable(
    runner: BwrapRunner, layout: Layout, mode: SandboxMode, canary: str
) -> None:
    flipped = "0" if canary.strip() == "1" else "1"
    script = f"echo {flipped} > {CANARY}; exit 0"
    result = run(runner, ["/bin/sh", "-c", script], policy(layout.ws, mode))
    assert CANARY.read_text() == canary
    assert "Read-only file system" in result.err or "Permission denied" in result.err, result.err
    trees = [t for t in KERNEL_TREES if os.path.lexists(t)]
    result = run(runner, [PY, "-c", WRITE_PROBE, *trees], policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    found = json.loads(result.out)
    assert found["tried"] > 1000, found["tried"]  # the walk really saw /proc/sys and /sys
    assert found["opened"] == []


@BOTH_MODES
def test_no_capability_in_any_set(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    result = run(runner, ["/bin/cat", "/proc/self/status"], policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    status = dict(line.split(":\t", 1) for line in result.out.splitlines() if ":\t" in line)
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[field], 16) == 0, (field, status[field])
    assert status["NoNewPrivs"].strip() == "1"


@BOTH_MODES
def test_kernel_leaks_are_masked(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    present = [p for p in ("/proc/keys", "/proc/key-users", "/proc/timer_list") if os.path.exists(p)]
    dirs = [p for p in ("/proc/acpi", "/sys/firmware") if os.path.isdir(p) and os.listdir(p)]
    assert present and dirs, "nothing to check on this host"
    script = "for f in " + " ".join(present) + '; do head -c 64 "$f"; done; ls -A ' + " ".join(dirs)
    result = run(runner, ["/bin/sh", "-c", script], policy(layout.ws, mode))
    visible = [line for line in result.out.splitlines() if line.strip() and not line.endswith(":")]
    assert visible == [], result.out


def test_writes_through_proc_self_fd_still_work(runner: BwrapRunner, layout: Layout) -> None:
    """/proc is read-only, but a magic link leaves it: the file behind the fd decides."""
    result = run(runner, ["/bin/sh", "-c", "exec 3>out; echo via-fd > /proc/self/fd/3; echo ok > /dev/stdout"],
                 policy(layout.ws))
    assert result.returncode == 0, result.err
    assert result.out == "ok\n"
    assert (layout.ws / "out").read_text() == "via-fd\n"


def test_workspace_writes_still_work_as_the_caller(runner: BwrapRunner, layout: Layout) -> None:
    """The caller's uid is kept: files written in the workspace belong to them."""
    result = run(runner, ["/bin/sh", "-c", "id -u; echo x > made"], policy(layout.ws))
    assert result.returncode == 0, result.err
    assert result.out.strip() == str(os.geteuid())
    assert (layout.ws / "made").stat().st_uid == os.geteuid()
