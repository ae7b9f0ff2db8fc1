"""The shared seccomp rules in the container, judged from the host where the host is involved."""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path

import pytest
from dsh.runners.linux.syscalls import native_arch
from dsh.sandbox.modes import SandboxMode

from tests.runners.docker.helpers import docker_runner, policy, run

NETWORK = pytest.mark.parametrize("network", [False, True], ids=["net-off", "net-on"])

PROBE = r"""
import ctypes, json, os, socket, sys, threading
out = {}
def errno_of(fn):
    try:
        fn(); return 0
    except OSError as exc:
        return exc.errno
target = sys.argv[1]
def reach():
    s = socket.socket(socket.AF_UNIX); s.connect(target); s.send(b"REACHED")
out["daemon_socket"] = errno_of(reach)
out["vsock"] = errno_of(lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM))
out["uevent"] = errno_of(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15))
out["route"] = errno_of(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_errno(nr, *args):
    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return 0 if rc >= 0 else ctypes.get_errno()
io_uring_setup, keyctl, unshare = (int(n) for n in sys.argv[2:5])
params = ctypes.create_string_buffer(120)
out["io_uring"] = sys_errno(io_uring_setup, 4, ctypes.addressof(params))
out["keyctl"] = sys_errno(keyctl, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID @s
out["unshare_user"] = sys_errno(unshare, 0x10000000)
a, b = socket.socketpair(); a.sendall(b"pair"); out["socketpair"] = b.recv(4).decode()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
threading.Thread(target=lambda: srv.accept()[0].sendall(b"tcp!")).start()
out["loopback"] = socket.create_connection(srv.getsockname()).recv(4).decode()
print(json.dumps(out))
"""


@NETWORK
@pytest.mark.parametrize("mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY], ids=["ws-write", "read-only"])
def test_seccomp_in_the_container(workspace: Path, mode: SandboxMode, network: bool) -> None:
    """A daemon socket bound inside the workspace, VSOCK, netlink, io_uring, keyrings, user namespaces."""
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(str(workspace / "daemon.sock"))
    daemon.listen(4)
    daemon.setblocking(False)
    numbers = native_arch().numbers
    nrs = [str(numbers["io_uring_setup"]), str(numbers["keyctl"]), "272" if native_arch().name == "x86_64" else "97"]
    try:
        with docker_runner() as runner:
            result = run(runner, ["python3", "-c", PROBE, str(workspace / "daemon.sock"), *nrs],
                         policy(workspace, mode, network=network))
        assert result.status.exit_code == 0, result.stderr
        with pytest.raises(BlockingIOError):
            daemon.accept()
    finally:
        daemon.close()
    assert json.loads(result.stdout) == {
        "daemon_socket": errno.EACCES,
        "vsock": errno.EACCES,
        "uevent": errno.EACCES,
        "route": 0,
        "io_uring": errno.ENOSYS,
        "keyctl": errno.EPERM,
        "unshare_user": errno.EPERM,
        "socketpair": "pair",
        "loopback": "tcp!",
    }
