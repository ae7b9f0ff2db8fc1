"""What a command could leave on, or do to, host files the filter keeps out: judged from the host.

Setuid/setgid files in the writable roots, inode generation changes and
leases through a read-only fd of a host file outside the roots, and a name
squatted in the host's abstract unix namespace.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.limits import DEGRADE_ESCAPE
from dsh.sandbox.modes import SandboxMode

from tests.runners import setid
from tests.runners.landlock.helpers import PY, RO, WW, finish, make_policy, py, start

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]
_FS_IOC_GETVERSION = 0x80087601
# Unprivileged there may be no pids cgroup: irrelevant to what is tested here, so accepted.
ACCEPT = (DEGRADE_ESCAPE,)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A world-writable folder in /tmp, as /tmp is a writable root by default."""
    folder = Path(tempfile.mkdtemp(prefix="dsh-setid-")).resolve()
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_no_setid_file_is_left_in_the_writable_roots(
    runner: LandlockRunner, layout: Layout, shared_tmp: Path
) -> None:
    ws, _ = layout
    seed = setid.seed(shared_tmp / "seed")
    tag = f"x{os.urandom(4).hex()}"
    policy = make_policy(WW, ws, extra_roots=(shared_tmp,), accept_degraded=ACCEPT)
    result = py(runner, policy, setid.SCRIPT, tag, str(seed), str(ws), str(shared_tmp))
    got = setid.outcomes(result.out)
    assert setid.leftovers([ws, shared_tmp], tag) == [], got
    for folder in (ws, shared_tmp):
        assert got[f"{folder} control-chmod"] == "ok" and got[f"{folder} control-install"] == "ok", result.err
        assert got[f"{folder} chmod-4755"] != "ok" and got[f"{folder} open"] == f"errno {errno.EPERM}", got


def _generation(path: Path) -> int:
    import fcntl
    import struct

    fd = os.open(path, os.O_RDONLY)
    try:
        return int(struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETVERSION, bytes(8)))[0])
    finally:
        os.close(fd)


_SETVERSION = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
for command in (0x40087602, 0x40047602, 0x40086604, 0x40046604):
    value = ctypes.c_long(0x5A5A5A)
    failed = libc.ioctl(fd, ctypes.c_ulong(command), ctypes.byref(value)) < 0
    print(hex(command), ctypes.get_errno() if failed else 0)
"""


@pytest.mark.parametrize("mode", MODES)
def test_inode_generation_of_a_host_file_stays(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    victim = outside / "victim"
    victim.write_text("host's\n")  # owned by the caller: the command's uid
    before, ctime = _generation(victim), victim.stat().st_ctime_ns
    result = py(runner, make_policy(mode, ws, accept_degraded=ACCEPT), _SETVERSION, str(victim))
    assert _generation(victim) == before and victim.stat().st_ctime_ns == ctime, result.out + result.err
    assert result.out.split()[1::2] == [str(errno.EPERM)] * 4, result.out + result.err


_HOLD = r"""
import fcntl, os, socket, sys, time
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return f"errno={exc.errno}"
fd = os.open(sys.argv[1], os.O_RDONLY)
pair = socket.socketpair()
print("lease", attempt(lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)),
      "bind", attempt(lambda: pair[0].bind(sys.argv[2].encode().replace(b"@", b"\0", 1))),
      "listen", attempt(lambda: pair[1].listen(1)), flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("mode", MODES)
def test_no_lease_and_no_abstract_name_held_against_the_host(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode
) -> None:
    ws, outside = layout
    victim = outside / "victim"
    victim.write_text("host's\n")
    name = f"@dsh-squat-{os.getpid()}-{os.urandom(4).hex()}"
    proc, launch = start(runner, make_policy(mode, ws, accept_degraded=ACCEPT), [PY, "-c", _HOLD, str(victim), name])
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        # While the command runs: a host writer is not stalled, and the host daemon gets its name.
        fd = os.open(victim, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
            daemon.bind("\0" + name[1:])
    finally:
        if launch.kill_tree is not None:
            launch.kill_tree(proc.pid, 9)
        proc.kill()
        finish(proc, launch)
    assert line.split() == ["lease", f"errno={errno.EPERM}", "bind", f"errno={errno.EACCES}", "listen",
                            f"errno={errno.EACCES}"], line  # fmt: skip
