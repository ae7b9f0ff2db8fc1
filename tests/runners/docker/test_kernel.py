"""Kernel interfaces from inside the container: documents what Docker already holds.

cap_drop=ALL empties every capability set; Docker's runtime masks /proc's
leaks and mounts /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus and /sys
read-only.  It leaves /proc/pressure open (see the test).  As root on the host these are the checks that matter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsh.sandbox.modes import SandboxMode

from tests.runners.docker.helpers import docker_runner, policy, run, sh
from tests.runners.kernel_probe import KERNEL_TREES, WRITE_PROBE

MODES = pytest.mark.parametrize("mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY],
                                ids=["ws-write", "read-only"])


@MODES
def test_no_kernel_interface_is_writable_and_no_capability_is_left(workspace: Path, mode: SandboxMode) -> None:
    with docker_runner() as runner:
        probe = run(runner, ["python3", "-c", WRITE_PROBE, *KERNEL_TREES], policy(workspace, mode))
        status = run(runner, ["cat", "/proc/self/status"], policy(workspace, mode))
        masked = sh(runner, "for f in /proc/keys /proc/timer_list /proc/kcore; do "
                    '[ -e "$f" ] && head -c 64 "$f"; done; echo end', policy(workspace, mode))
    assert probe.status.exit_code == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["tried"] > 1000, found["tried"]
    # /proc/pressure/* open for writing registers a PSI poll trigger that lives
    # only as long as that fd (any host user may do it): no host state changes.
    assert [p for p in found["opened"] if not p.startswith("/proc/pressure/")] == []
    fields = dict(line.split(":\t", 1) for line in status.stdout.decode().splitlines() if ":\t" in line)
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[name], 16) == 0, (name, fields[name])
    assert fields["NoNewPrivs"].strip() == "1"
    assert masked.stdout == b"end\n", masked.stdout
