"""Live tests against the real E2B service; they run only when E2B_API_KEY is set.

They skip (never fail) without a key, even when CI lists ``e2b`` in
``DSH_REQUIRE``: CI's e2b requirement is met by the offline tests
against the envd double, and a secret key cannot be required of every CI.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.e2b import E2BRunner
from dsh.sandbox.runner import ExitStatus

from tests.runners.e2b.helpers import policy, run, start
from tests.support.wait import PATIENCE_S, wait_until


@pytest.fixture
def live_runner() -> Iterator[E2BRunner]:
    runner = E2BRunner({"timeout": 600})
    probe = runner.probe()
    if not probe.available:
        pytest.skip(f"SANDBOX_UNAVAILABLE: e2b: {probe.reason}")
    yield runner
    runner.close()


def test_live_run_exit_and_exact_argv(live_runner: E2BRunner, workspace: Path) -> None:
    argv: list[str | bytes] = ["printf", "%s|", "a b", "$HOME", b"\xff"]
    ran = run(live_runner, argv, policy("read-only", workspace))
    assert ran.status == ExitStatus(0) and ran.stdout == b"a b|$HOME|\xff|"
    ran = run(live_runner, ["sh", "-c", "echo e >&2; exit 7"], policy("read-only", workspace))
    assert ran.status == ExitStatus(7) and ran.stderr == b"e\n"


def test_live_users_have_no_sudo_and_read_only_cannot_write(live_runner: E2BRunner,
                                                            workspace: Path) -> None:
    (workspace / "a.txt").write_text("host")
    ran = run(live_runner, ["sh", "-c", "sudo -n true; echo sudo=$?; echo x > a.txt; echo w=$?"],
              policy("read-only", workspace))
    assert b"sudo=0" not in ran.stdout and b"w=0" not in ran.stdout
    assert (workspace / "a.txt").read_text() == "host"


def test_live_workspace_write_syncs_back(live_runner: E2BRunner, workspace: Path) -> None:
    ran = run(live_runner, ["sh", "-c", "echo new > new.txt; ln -s /etc etc"],
              policy("workspace-write", workspace))
    assert b"sync-back refused" in ran.stderr
    assert not (workspace / "new.txt").exists()
    ran = run(live_runner, ["sh", "-c", "rm etc; echo new > new.txt"],
              policy("workspace-write", workspace))
    assert (workspace / "new.txt").read_text() == "new\n"


def test_live_kill(live_runner: E2BRunner, workspace: Path) -> None:
    proc, out = start(live_runner, ["sh", "-c", "echo up; sleep 300"],
                      policy("read-only", workspace))
    wait_until(lambda: out.stdout_so_far() == b"up\n", "the command to start")
    proc.kill(signal.SIGKILL)
    assert proc.wait(PATIENCE_S) == ExitStatus(None, signal.SIGKILL)
