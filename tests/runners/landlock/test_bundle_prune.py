"""``runners --prune`` removes the CA bundle directories of Landlock sessions
that were killed before their runner closed, and only those (the owner's pid
and start time are in the name), and never another user's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

from dsh.runners.landlock.secrets import _write, prune_bundles

from tests.support.cli import cli

WRITE = ("from dsh.runners.landlock.secrets import _write; print(_write(b'cert'), flush=True); "
         "import time; time.sleep(60)")


def test_a_killed_sessions_bundle_goes_and_a_live_ones_stays() -> None:
    child = subprocess.Popen([sys.executable, "-c", WRITE], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    dead = os.path.dirname(child.stdout.readline().strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    live = os.path.dirname(_write(b"cert"))
    others = os.path.join(os.path.dirname(live), "dsh-sandbox-ca-1-1-other")
    os.mkdir(others)
    if os.geteuid() == 0:
        os.chown(others, 65534, 65534)
    try:
        assert os.path.isdir(dead) and os.path.basename(dead).startswith(f"dsh-sandbox-ca-{child.pid}-")
        removed = prune_bundles()
        assert dead in removed and not os.path.exists(dead)
        assert live not in removed and os.path.isfile(os.path.join(live, "ca-bundle.pem"))
        if os.geteuid() == 0:
            assert others not in removed and os.path.isdir(others)  # another user's: not ours to judge
        assert live in prune_bundles(everything=True) and not os.path.exists(live)
    finally:
        for path in (dead, live, others):
            shutil.rmtree(path, ignore_errors=True)


def test_the_cli_prune_lists_what_it_removed() -> None:
    child = subprocess.Popen([sys.executable, "-c", WRITE], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    dead = os.path.dirname(child.stdout.readline().strip())
    child.kill()
    child.wait()
    try:
        done = cli("runners", "--prune")
        out = done.stdout.decode()
        assert done.returncode == 0, done.stderr
        assert dead in out and "leftover(s)" in out and not os.path.exists(dead)
    finally:
        shutil.rmtree(dead, ignore_errors=True)
