"""The process layer without Linux's pidfd and eventfd (as on macOS).

The fd stand-ins are checked directly with the calls hidden, and the core
executor tests (spawn, output, timeout, kill of the group, teardown) run
again in a subprocess where the calls do not exist at all.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
from pathlib import Path

import pytest
from dsh.executors import portable

from tests.support.no_linux_fds import HIDDEN

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_linux_fds(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in HIDDEN:
        monkeypatch.delattr(os, name, raising=False)


def _readable(fd: int, timeout: float) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(timeout))


def test_wake_without_eventfd(no_linux_fds: None) -> None:
    wake = portable.Wake()
    try:
        assert not _readable(wake.fd, 0)
        for _ in range(100_000):  # more pokes than a pipe holds: never blocks
            wake.poke()
        assert _readable(wake.fd, 0)
        wake.drain()
        assert not _readable(wake.fd, 0)
    finally:
        wake.close()


def test_exit_fd_without_pidfd(no_linux_fds: None) -> None:
    child = subprocess.Popen(["cat"], stdout=subprocess.DEVNULL, stdin=subprocess.PIPE)
    fd = portable.exit_fd(child.pid)
    try:
        assert not _readable(fd, 0.2)  # running
        assert child.stdin is not None
        child.stdin.close()
        assert _readable(fd, 60)
        # Still a zombie (WNOWAIT): the pid cannot be reused before we reap it.
        info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        assert info is not None and info.si_status == 0
    finally:
        os.close(fd)
        child.wait()


def test_core_executor_tests_pass_without_linux_fds() -> None:
    files = ["tests/executors/test_teardown.py", "tests/executors/test_execution.py"]
    check = ("import os; from tests.support.no_linux_fds import HIDDEN; "
             "assert not any(hasattr(os, n) for n in HIDDEN)")
    subprocess.run([sys.executable, "-c", check], cwd=ROOT, check=True, timeout=60)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "-p", "tests.support.no_linux_fds", *files],
        cwd=ROOT, capture_output=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout.decode()[-3000:]
    assert b" passed" in done.stdout and b"skipped" not in done.stdout, done.stdout[-500:]
