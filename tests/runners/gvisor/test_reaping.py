"""A session that starts and ends gVisor sandboxes leaves no zombie behind.

The executor makes the host process a child subreaper, so the processes runsc
daemonizes (the sandbox, the gofer and what they start) become its children;
unreaped, each ended sandbox left about eight zombies, and a conformance run
as ``nobody`` ran out of processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.require import require_runner

CHILD = """
import ctypes, os, sys, time
from pathlib import Path
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the executor does
from dsh.runners.gvisor import GvisorRunner
from tests.runners.gvisor.helpers import policy, sh

def zombies():
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            out.append(int(name))
    return out

ws = Path(sys.argv[1])
for _ in range(2):
    runner = GvisorRunner()
    assert sh(runner, "echo hi", policy(ws)).out == b"hi\\n"
    runner.close()
deadline = time.monotonic() + 10
while zombies() and time.monotonic() < deadline:
    time.sleep(0.1)
print(len(zombies()))
"""


def test_closed_sandboxes_leave_no_zombies(ws: Path) -> None:
    require_runner("gvisor")
    checkout = str(Path(__file__).resolve().parents[3])  # for the test helpers
    done = subprocess.run([sys.executable, "-P", "-c", CHILD, str(ws)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": checkout}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", done.stdout + done.stderr


def test_a_sandbox_whose_state_was_removed_is_still_killed(ws: Path) -> None:
    """runsc finds a sandbox by its state directory; removed during the session
    (the user's cache cleaned, a test's scratch directory gone), ``runsc
    delete`` found nothing and the sandbox and gofer ran on, orphaned."""
    require_runner("gvisor")
    import shutil

    from dsh.runners.gvisor import GvisorRunner

    from tests.runners.gvisor.helpers import policy, sh

    runner = GvisorRunner()
    try:
        assert sh(runner, "echo hi", policy(ws)).out == b"hi\n"
        warm = next(iter(runner._warm.values()))
        pids = [p for p in (warm.pid, warm.gofer) if p is not None]
        assert pids and all(Path(f"/proc/{p}").exists() for p in pids)
        shutil.rmtree(warm.runsc[warm.runsc.index("-root") + 1])  # runsc's state of the session
    finally:
        runner.close()
    from tests.support.wait import wait_until

    def running() -> list[int]:
        return [p for p in pids if Path(f"/proc/{p}").exists()
                and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")]

    wait_until(lambda: not running(), lambda: f"still running: {running()}")


def test_what_a_failed_start_left_naming_the_bundle_is_killed(tmp_path: Path) -> None:
    """A ``runsc create`` that timed out says nothing of the sandbox and gofer
    it daemonized; they name the bundle in their arguments (``--bundle X``,
    ``--bundle=X``), and tearing the sandbox down kills them."""
    from dsh.runners.gvisor.sandbox import WarmSandbox

    bundle = tmp_path / "bundles" / "dsh-1-abc"
    bundle.mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    left = [subprocess.Popen([*sleeper, "gofer", "--bundle", str(bundle)]),
            subprocess.Popen([*sleeper, "boot", f"--bundle={bundle}"])]
    other = subprocess.Popen([*sleeper, "--bundle", f"{bundle}-other"])
    try:
        WarmSandbox("dsh-1-abc", ("/bin/false",), bundle).destroy()
        for p in left:
            p.wait(timeout=10)  # killed (and reaped by the teardown: its status is gone)
            assert not os.path.exists(f"/proc/{p.pid}")
        assert other.poll() is None
        assert not bundle.exists()
    finally:
        for p in (*left, other):
            p.kill()
            p.wait()
