"""Host processes, the caller's terminal and inode flags, checked from the host after the run."""

from __future__ import annotations

import array
import errno
import fcntl
import os
import resource
import subprocess
import tempfile
import termios
import tty
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import PY, RO, WW, make_policy, py, sh

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]
FS_IOC_GETFLAGS = 0x80086601
FS_NOATIME_FL = 0x80
FS_NODUMP_FL = 0x40


def _ioprio(pid: int) -> str:
    return subprocess.run(["ionice", "-p", str(pid)], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def victim() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "300"])  # a same-uid host process outside the sandbox
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", MODES)
def test_host_processes_cannot_be_controlled(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode, victim: int
) -> None:
    supervisor = os.getpid()  # the process that supervises the command (and runs its spawner thread)
    core = resource.getrlimit(resource.RLIMIT_CORE)
    soft = 0 if core[0] != 0 else 1
    before = {pid: (os.getpriority(os.PRIO_PROCESS, pid), _ioprio(pid), os.sched_getaffinity(pid),
                    os.sched_getscheduler(pid)) for pid in (victim, supervisor)}  # fmt: skip
    script = "; ".join(
        f"prlimit --pid {pid} --core={soft}:{core[1] if core[1] >= 0 else 'unlimited'} && echo OK-prlimit-{pid}; "
        f"renice -n 15 -p {pid} && echo OK-renice-{pid}; "
        f"ionice -c3 -p {pid} && echo OK-ionice-{pid}; "
        f"taskset -p -c 0 {pid} && echo OK-taskset-{pid}; "
        f"chrt -b -p 0 {pid} && echo OK-chrt-{pid}"
        for pid in (victim, supervisor)
    )
    # Lowering the host's own limits must be undoable by the test (a soft limit only).
    script += f"; prlimit --pid {victim} --nofile=5:5 && echo OK-nofile; renice -n 5 -u $(id -u) && echo OK-renice-user"
    try:
        result = sh(runner, make_policy(mode, layout[0]), script)
    finally:
        if resource.getrlimit(resource.RLIMIT_CORE) != core:  # put the test process back
            resource.setrlimit(resource.RLIMIT_CORE, core)
    assert "OK-" not in result.out, result.out + result.err
    assert resource.getrlimit(resource.RLIMIT_CORE) == core
    after = {pid: (os.getpriority(os.PRIO_PROCESS, pid), _ioprio(pid), os.sched_getaffinity(pid),
                   os.sched_getscheduler(pid)) for pid in (victim, supervisor)}  # fmt: skip
    assert after == before
    with open(f"/proc/{victim}/limits", encoding="ascii") as limits:
        assert not any(line.startswith("Max open files") and line.split()[3] == "5" for line in limits)


@pytest.mark.parametrize("mode", MODES)
def test_own_process_forms_still_work(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    script = (
        "ulimit -n 100 && ulimit -n; nice -n 5 nice; taskset -c 0 true && echo taskset; "
        "ionice -c3 true && echo ionice; ionice -c3 ionice; prlimit --nofile=50:50 sh -c 'ulimit -n'"
    )
    result = sh(runner, make_policy(mode, layout[0]), script)
    assert result.out.split() == ["100", "5", "taskset", "ionice", "idle", "50"], result.out + result.err


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int, str]]:
    """A pseudo-terminal on the host, raw (no echo): (master, slave, slave path)."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        yield master, slave, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


TERMINAL = """
import os, sys
for path in sys.argv[1:]:
    for label, flags in (('read', os.O_RDONLY), ('write', os.O_WRONLY)):
        try:
            fd = os.open(path, flags | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as exc:
            print(path, label, exc.errno)
            continue
        try:
            print(path, label, 'opened', os.read(fd, 100) if flags == os.O_RDONLY else os.write(fd, b'spoofed'))
        except OSError as exc:
            print(path, label, 'opened', exc.errno)
"""


@pytest.mark.parametrize("mode", MODES)
def test_the_callers_terminal_is_out_of_reach(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode, pty_pair: tuple[int, int, str]
) -> None:
    master, slave, path = pty_pair
    os.write(master, b"typed-secret\n")  # what the user typed, waiting to be read
    devices = [path, "/dev/tty", "/dev/console", "/dev/ptmx"]
    result = py(runner, make_policy(mode, layout[0]), TERMINAL, *devices)
    lines = result.out.splitlines()
    assert len(lines) == 2 * len(devices), result.out + result.err
    for line in lines:
        assert line.split()[-1] == str(errno.EACCES), line
    os.set_blocking(slave, False)
    assert os.read(slave, 100) == b"typed-secret\n"  # nobody consumed it
    os.set_blocking(master, False)
    with pytest.raises(BlockingIOError):
        os.read(master, 100)  # nothing was written to the terminal
    assert any("no terminal" in n for n in runner.explain(make_policy(mode, layout[0])).rules)


def test_an_inherited_terminal_keeps_working(
    runner: LandlockRunner, layout: Layout, pty_pair: tuple[int, int, str]
) -> None:
    master, slave, _ = pty_pair
    code = "import os, sys; print(os.isatty(1), os.get_terminal_size(1).columns >= 0); sys.stdout.flush()"
    launch = runner.prepare([PY, "-c", code], make_policy(RO, layout[0]), cwd=str(layout[0]), env={})
    assert launch.spawn_in is not None
    proc = launch.spawn_in(lambda: subprocess.Popen(list(launch.argv), stdout=slave, stderr=subprocess.DEVNULL))
    assert proc.wait(timeout=120) == 0
    assert os.read(master, 100).split() == [b"True", b"True"]


INODE_FLAGS = """
import ctypes, fcntl, os, struct, sys
from dsh.runners.linux.syscalls import native_arch
path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
for label, cmd, arg in (('setflags', 0x40086602, struct.pack('q', 0x80 | 0x40)),
                        ('setflags32', 0x40046602, struct.pack('i', 0x80)),
                        ('fssetxattr', 0x401C5820, struct.pack('IIIII8x', 0x40, 0, 0, 0, 0))):
    try:
        fcntl.ioctl(fd, cmd, arg); print(label, 'ok')
    except OSError as exc:
        print(label, exc.errno)
libc = ctypes.CDLL(None, use_errno=True)
attr = ctypes.create_string_buffer(struct.pack('QIIII', 0x40, 0, 0, 0, 0), 24)
rc = libc.syscall(native_arch().numbers['file_setattr'], -100, path.encode(), attr, 24, 0)
print('file_setattr', 'ok' if rc == 0 else ctypes.get_errno())
"""


@pytest.mark.parametrize("mode", MODES)
def test_inode_flags_outside_the_roots_cannot_change(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    with tempfile.NamedTemporaryFile(dir="/var/tmp", prefix="dsh-flags-") as handle:  # ext4: flags supported
        flags = array.array("l", [0])
        fcntl.ioctl(handle.fileno(), FS_IOC_GETFLAGS, flags, True)
        before = flags[0]
        assert not before & (FS_NOATIME_FL | FS_NODUMP_FL)
        result = py(runner, make_policy(mode, layout[0]), INODE_FLAGS, handle.name)
        chattr = sh(runner, make_policy(mode, layout[0]), f"chattr +A '{handle.name}'; chattr +i '{handle.name}'")
        fcntl.ioctl(handle.fileno(), FS_IOC_GETFLAGS, flags, True)
        assert flags[0] == before, (result.out, chattr.err)
        assert result.out.split() == [
            "setflags", str(errno.EPERM), "setflags32", str(errno.EPERM), "fssetxattr", str(errno.EPERM),
            "file_setattr", str(errno.EPERM),
        ], result.out + result.err  # fmt: skip
        assert chattr.returncode != 0


def test_terminal_ioctl_constants() -> None:
    assert termios.TIOCSTI == 0x5412  # what the filter names
