"""No new namespace under Landlock: a user namespace would give the command every
capability inside it, and with them the mount API, new network, IPC and UTS
namespaces and ``chroot`` (what bwrap closes with ``--disable-userns``).

Each attack prints what it got; the host checks that the first step (the user
namespace) was refused and that nothing after it ran with capabilities.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import RO, WW, make_policy, py, sh

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]

# unshare(CLONE_NEWUSER), then what a namespace's root could do with it.
ESCAPE = """
import ctypes, os, platform
L = ctypes.CDLL(None, use_errno=True)
L.syscall.restype = ctypes.c_long
FSOPEN = 430
def attempt(name, call):
    r = call()
    print(name, 'ok' if r >= 0 else 'refused', ctypes.get_errno() if r < 0 else r, flush=True)
attempt('userns', lambda: L.unshare(0x10000000))
print(open('/proc/self/status').read().split('CapEff:')[1].split()[0], flush=True)
attempt('netns', lambda: L.unshare(0x40000000))
attempt('mntns', lambda: L.unshare(0x00020000))
attempt('fsopen', lambda: L.syscall(ctypes.c_long(FSOPEN), b'tmpfs', ctypes.c_long(0)))
attempt('chroot', lambda: L.chroot(b'/'))
"""


@pytest.mark.parametrize("mode", MODES)
def test_no_user_namespace_and_nothing_behind_it(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    result = py(runner, make_policy(mode, layout[0]), ESCAPE)
    assert result.returncode == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "userns refused 1", result.out
    assert lines[1] == "0000000000000000", "the command holds capabilities"
    assert all(" refused " in line for line in lines[2:]) and len(lines) == 6, result.out


@pytest.mark.skipif(shutil.which("unshare") is None, reason="SANDBOX_UNAVAILABLE: util-linux unshare is missing")
def test_unshare_tool_is_refused(runner: LandlockRunner, layout: Layout) -> None:
    # -U alone (no uid map to write): a namespace created this way holds a full CapEff.
    result = sh(runner, make_policy(WW, layout[0]), "unshare -U grep CapEff /proc/self/status; echo rc=$?")
    assert "CapEff" not in result.out and "rc=1" in result.out, result.out + result.err
    assert "Operation not permitted" in result.err


def test_threads_and_children_still_work(runner: LandlockRunner, layout: Layout) -> None:
    code = ("import subprocess, threading\nt = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
            "print(subprocess.run(['sh', '-c', 'echo child & wait'], capture_output=True, text=True).stdout.strip())")
    result = py(runner, make_policy(RO, layout[0]), code)
    assert result.out.split() == ["thread", "child"], result.out + result.err
