"""The sandbox sees a private copy of the host's mounts, taken before bwrap starts.

Both tests change the host's mount table while sandboxes run, as a busy host
does (container starts and stops, automounts): a mount arriving late must not
be writable inside a read-only sandbox, and mounts coming and going must not
make a launch fail before its command starts.  Mounting needs root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.bwrap.helpers import policy, sh

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="SANDBOX_UNAVAILABLE: changing the host's mount table needs root"
)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A shared mount point on the host: mounts made under it propagate to its peers.

    Under /var/tmp, not pytest's /tmp, which sandboxes may get a fresh copy of.
    """
    base = Path(tempfile.mkdtemp(prefix="dsh-mount-snapshot-", dir="/var/tmp"))
    point = base / "shared"
    point.mkdir()
    _mount("--bind", str(point), str(point))
    try:
        _mount("--make-shared", str(point))
        yield point
    finally:
        _umount(point)
        shutil.rmtree(base, ignore_errors=True)


def test_a_host_mount_made_during_the_run_is_not_writable(runner: BwrapRunner, shared: Path, tmp_path: Path) -> None:
    late = shared / "late"
    late.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    started = threading.Event()

    def mount_when_started() -> None:
        started.wait(60)
        _mount("-t", "tmpfs", "dsh-late", str(late))

    mounter = threading.Thread(target=mount_when_started)
    mounter.start()
    try:
        # The command waits until the host's mount exists (a marker on it), then writes.
        started.set()
        done = sh(runner, f"""
            for i in $(seq 100); do grep -q ' {late} ' /proc/self/mountinfo && break; sleep 0.05; done
            echo attempt > {late}/planted && echo WROTE""", policy(ws, SandboxMode.READ_ONLY))
        mounter.join()
        assert not (late / "planted").exists(), "the command wrote into a filesystem the host mounted late"
        assert b"WROTE" not in done.stdout
    finally:
        mounter.join()
        _umount(late)


def test_mounts_coming_and_going_do_not_break_launches(runner: BwrapRunner, shared: Path, tmp_path: Path) -> None:
    churn = shared / "churn"
    churn.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    stop = threading.Event()

    def churn_mounts() -> None:
        while not stop.is_set():
            subprocess.run(["mount", "-t", "tmpfs", "dsh-churn", str(churn)], check=False, capture_output=True)
            _umount(churn)

    churner = threading.Thread(target=churn_mounts)
    churner.start()
    failures: list[bytes] = []
    try:
        deadline = time.monotonic() + 120
        for _ in range(150):
            if time.monotonic() > deadline:
                break
            done = sh(runner, "cat /etc/hostname >/dev/null && echo ok", policy(ws, SandboxMode.READ_ONLY))
            if done.stdout != b"ok\n":
                failures.append(done.stderr)
    finally:
        stop.set()
        churner.join()
        _umount(churn)
    assert not failures, f"{len(failures)} launches failed while host mounts changed: {failures[0]!r}"
