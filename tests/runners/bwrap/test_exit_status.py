"""bwrap exits 1 for a command that exits 1, for an ``execve`` it could not do
and for its own setup failures: its status pipe tells them apart."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from dsh.runners.bwrap.lifecycle import SandboxLifecycle
from dsh.runners.bwrap.materialize import OpenedMounts
from dsh.sandbox.runner import ExitStatus

from tests.support.sandboxed import need_runner


def _status(*args: str) -> ExitStatus:
    """Run a minimal real bwrap; the status the lifecycle makes of it."""
    need_runner("bwrap")
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    life = SandboxLifecycle(OpenedMounts())
    try:
        done = subprocess.run(
            [bwrap, "--unshare-user", "--json-status-fd", str(life.status_write), *args],
            pass_fds=life.pass_fds, capture_output=True, timeout=60, check=False,
        )
        return life.exit_status(ExitStatus(exit_code=done.returncode), lambda: done.stderr)
    finally:
        life.cleanup()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ro-bind", "/", "/", "sh", "-c", "exit 1"], ExitStatus(exit_code=1)),
        # the command printing bwrap's words changes nothing
        (["--ro-bind", "/", "/", "sh", "-c", "echo 'bwrap: execvp x: Permission denied' >&2; exit 1"],
         ExitStatus(exit_code=1)),
        (["--ro-bind", "/", "/", "dsh-no-such-command"], ExitStatus(exit_code=127)),
        (["--ro-bind", "/", "/", "/etc"], ExitStatus(exit_code=126)),
        # setup failed: the command never started, which is not its status
        (["--ro-bind", "/dsh-no-such-source", "/", "true"], ExitStatus(exit_code=None)),
    ],
)
def test_exec_and_setup_failures_are_told_apart(args: list[str], expected: ExitStatus) -> None:
    assert _status(*args) == expected
