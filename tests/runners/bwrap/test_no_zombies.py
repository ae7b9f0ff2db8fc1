"""A long-lived supervisor keeps no zombie per sandbox.

bwrap's monitor exits before its pid 1 is gone, so pid 1 comes back to the
supervisor (a child subreaper) and dies there.  Unreaped, every command (and
every session's host probe) left one zombie, and as an unprivileged user they
count against ``RLIMIT_NPROC``: after a few hundred commands bwrap could not
fork (``Creating new namespace failed: Resource temporarily unavailable``).
A fresh Python process runs commands in several sessions, as an agent or the
conformance harness does, then lists its zombie children.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dsh.runners.bwrap import BwrapRunner

from tests.support.wait import PATIENCE_S

SUPERVISOR = r"""
import os, sys, time
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.session import SessionSpec, build_session

def zombies():
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.append(stat[:stat.rfind(")") + 1])
    return found

codes = []
for mode in ("read-only", "workspace-write", "workspace-write"):
    spec = SessionSpec(mode=mode, workspace=sys.argv[1], runner="bwrap", executor="bash-sandbox")
    with build_session(spec) as ctx:
        shell = ctx.require(ShellExecutor)
        for command in ("true", "exit 3", "sleep 0.2 & echo started"):
            codes.append(shell.execute(shell.resolve(ShellExecRequest(command=command))).result().exit_code)
time.sleep(0.5)  # anything still dying has died
print(codes, zombies())
"""


def test_a_supervisor_reaps_every_sandbox_init(runner: BwrapRunner, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SUPERVISOR, str(tmp_path)], capture_output=True, text=True,
                         timeout=PATIENCE_S * 4, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([0, 3, 0] * 3) + " []", out.stdout + out.stderr
