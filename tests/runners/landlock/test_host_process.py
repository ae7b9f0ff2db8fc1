"""Attacks on the host process itself.

A sandboxed child shares the Landlock domain of the spawner thread, and that
thread shares the host's memory: Landlock alone would let the child signal it
(a signal to one thread can kill the whole host), attach to it or read the
host's ``/proc/<pid>/environ``.  The runner closes these holes.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner

from tests.runners.landlock.helpers import PY, WW, make_policy, py, sh

Layout = tuple[Path, Path]


def _spawner_tids() -> list[int]:
    tids = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
            if comm.read().strip() == "dsh-landlock":
                tids.append(int(task))
    return tids


ATTACKS = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, tids = int(sys.argv[1]), [int(t) for t in sys.argv[2].split(',')]
def report(name, rc):
    print(name, 'ok' if rc >= 0 else ctypes.get_errno())
for label, path in [('environ', f'/proc/{pid}/environ'), ('mem', f'/proc/{pid}/mem')]:
    try:
        open(path, 'rb').close(); print(label, 'ok')
    except OSError as exc:
        print(label, exc.errno)
for tid in tids:
    for label, path in [('tenviron', f'/proc/{pid}/task/{tid}/environ'), ('tmem', f'/proc/{tid}/mem')]:
        try:
            open(path, 'rb').close(); print(label, 'ok')
        except OSError as exc:
            print(label, exc.errno)
    report('kill', libc.syscall(62, tid, 0))
    report('tgkill', libc.syscall(234, pid, tid, 0))
    report('tkill', libc.syscall(200, tid, 0))
    report('pidfd_open', libc.syscall(434, tid, 0))
    report('ptrace', libc.syscall(101, 16, tid, 0, 0))  # PTRACE_ATTACH
    iov = (ctypes.c_char * 8)()
    class Iov(ctypes.Structure):
        _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
    local = Iov(ctypes.addressof(iov), 8)
    report('process_vm_readv', libc.syscall(310, tid, ctypes.byref(local), 1, ctypes.byref(local), 1, 0))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64",
                    reason="SANDBOX_UNAVAILABLE: syscall numbers in the attack are x86_64")
def test_child_cannot_touch_the_host_process(runner: LandlockRunner, layout: Layout) -> None:
    policy = make_policy(WW, layout[0])
    assert sh(runner, policy, "true").returncode == 0  # the spawner exists now
    tids = _spawner_tids()
    assert tids
    result = py(runner, policy, ATTACKS, str(os.getpid()), ",".join(map(str, tids)))
    lines = result.out.splitlines()
    assert lines, result.err
    for line in lines:
        name, outcome = line.split()
        assert outcome != "ok", f"{name} reached the host process: {result.out}"
        assert int(outcome) in (errno.EPERM, errno.EACCES, errno.ESRCH), line
    assert len(lines) == 2 + 8 * len(tids)


HUNT = """
import os, sys
parent = os.getppid()
for task in ["", *(f"/task/{t}" for t in os.listdir(f"/proc/{parent}/task"))]:
    try:
        sys.stdout.write(open(f"/proc/{parent}{task}/environ", "rb").read().decode("latin-1"))
    except OSError as exc:
        print("denied", exc.errno)
"""

HOST = """
import subprocess, sys
from pathlib import Path
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
ws = Path(sys.argv[1])
runner = LandlockRunner()
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                       accept_degraded=("landlock-metadata", "landlock-process-list"))
launch = runner.prepare([sys.executable, sys.argv[2]], policy, cwd=str(ws), env={})
env = {"PATH": "/usr/bin:/bin"}  # the child's own env is clean; it hunts the parent's
proc = launch.spawn_in(lambda: subprocess.Popen(list(launch.argv), env=env, stdout=subprocess.PIPE))
sys.stdout.write(proc.communicate(timeout=120)[0].decode())
runner.close()
"""


def test_secret_in_the_host_environment_does_not_leak(layout: Layout, tmp_path: Path) -> None:
    # A fresh host process whose *initial* environment (what /proc/<pid>/environ
    # shows) holds a secret, spawning a child that hunts for it.
    (tmp_path / "host.py").write_text(HOST)
    (tmp_path / "hunt.py").write_text(HUNT)
    env = {**os.environ, "DSH_TEST_SECRET": "hunter2-credential"}
    argv = [PY, str(tmp_path / "host.py"), str(layout[0]), str(tmp_path / "hunt.py")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "denied" in done.stdout
    assert "hunter2-credential" not in done.stdout
