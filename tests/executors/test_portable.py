"""The process layer without Linux's pidfd and eventfd, nor ``os.waitid``
(as on macOS, where Python has ``waitid`` only from 3.13).

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
from dsh.sandbox.runner import ExitStatus

from tests.support.no_linux_fds import HIDDEN

ROOT = Path(__file__).resolve().parents[2]
REAL_WAITID = os.waitid


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


@pytest.mark.parametrize("waitid", [True, False], ids=["waitid", "no-waitid"])
def test_exit_watch_without_pidfd(no_linux_fds: None, waitid: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if waitid:
        monkeypatch.setattr(os, "waitid", REAL_WAITID, raising=False)  # macOS from Python 3.13
    child = subprocess.Popen(["sh", "-c", "cat >/dev/null; exit 7"], stdin=subprocess.PIPE)
    watch = portable.ExitWatch(child.pid)
    try:
        assert not _readable(watch.fd, 0.2) and watch.status() is None  # running
        assert child.stdin is not None
        child.stdin.close()
        assert _readable(watch.fd, 60)
        assert watch.status() == ExitStatus(exit_code=7)
        if waitid:  # still a zombie (WNOWAIT): its pid cannot be reused before we reap it
            assert REAL_WAITID(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    finally:
        watch.close()
        child.wait()


def test_core_executor_tests_pass_without_linux_fds() -> None:
    files = ["tests/executors/test_teardown.py", "tests/executors/test_execution.py"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-p", "no:cacheprovider",
         "-p", "tests.support.no_linux_fds", *files],
        cwd=ROOT, capture_output=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout.decode()[-3000:]
    assert ("hidden: " + ",".join(HIDDEN)).encode() in done.stdout  # the fallbacks ran
    assert b" passed" in done.stdout and b"skipped" not in done.stdout, done.stdout[-500:]
