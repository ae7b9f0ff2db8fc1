"""The command cannot stop the sandbox's init (pid 1) by tracing it.

bwrap's init and docker-init reap the command; a command that
``PTRACE_ATTACH``es pid 1 leaves it stopped, and ``run`` used to hang forever
(or report a timeout for a command that had exited).  The shared seccomp
rules refuse ``ptrace`` and ``process_vm_*`` on pid 1 where the command has
its own pid namespace.  The attach must fail with EPERM, the run must end
with the command's status, and tracing the command's own child still works.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.require import require_runner

ATTACH = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
r = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
print("init", r, ctypes.get_errno(), flush=True)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
r = libc.ptrace(16, child, None, None)
print("child", r, flush=True)
os.kill(child, 9)
sys.exit(7)
"""


@pytest.mark.parametrize("runner", ["bwrap", "docker"])
@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_the_command_cannot_ptrace_the_sandbox_init(runner: str, mode: str, workspace: Path) -> None:
    require_runner(runner)
    try:
        done = cli("run", "--runner", runner, "--mode", mode, "--timeout", "60", "--", "python3", "-c", ATTACH,
                   cwd=workspace)
    except subprocess.TimeoutExpired:
        pytest.fail("run hung: the command stopped the sandbox's init")
    assert done.stdout.decode().splitlines() == ["init -1 1", "child 0"], done.stderr
    assert done.returncode == 7, done.stderr
