"""A remote command that exits while what it started still holds its output.

Local runners learn of the exit from a pidfd; a remote process (gVisor's
``runsc exec``, a Docker exec) has none, and the output pipes stay open as
long as a background job holds them.  The exit must still end the run at
once, with the command's own status, and its leftovers killed, as locally:
it used to wait for the deadline and report a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.require import require_runner


@pytest.mark.parametrize("runner", ["gvisor", "docker"])
def test_the_exit_ends_the_run_though_a_background_job_holds_the_output(runner: str) -> None:
    require_runner(runner)
    ws = Path(tempfile.mkdtemp(prefix="dsh-remote-leader-", dir="/var/tmp")).resolve()
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", runner, "--workspace", str(ws),
             "--timeout", "120",
             "--", "sh", "-c", "sleep 600 & echo leader-done"],
            capture_output=True, text=True, timeout=300, cwd=ws, env={**os.environ, "LC_ALL": "C"},
        )
        elapsed = time.monotonic() - started
    finally:
        subprocess.run(["rm", "-rf", str(ws)], check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "leader-done\n"
    assert "timed out" not in done.stderr
    assert elapsed < 60, f"the run waited {elapsed:.0f} s for the background job"
