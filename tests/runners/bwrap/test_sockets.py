"""Host-shared kernel objects and sockets under bwrap, judged from the host.

Host unix sockets must be unreachable however they were bound (absolute or
relative path, abstract name) and whenever (before the start or during the
run); keyrings, AF_VSOCK, non-route netlink and io_uring are refused; local
IPC the command makes itself (socketpair, loopback TCP) keeps working.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.runners.linux.syscalls import native_arch
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import LocalLaunch

from tests.runners.bwrap.helpers import BOTH_MODES, Layout, policy, run, spawn
from tests.support.wait import await_line

PY = sys.executable
NETWORK = pytest.mark.parametrize("network", [False, True], ids=["net-off", "net-on"])

#: Tries every way to one host socket; prints REACHED when any works.
UNIX_ATTACK = r"""
import os, socket, sys, time
path, marker = sys.argv[1], sys.argv[2]
if marker != "-":
    print("waiting", flush=True)
    while not os.path.exists(marker):
        time.sleep(0.02)
address = path.encode() if not path.startswith("@") else b"\0" + path[1:].encode()
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):
    try:
        s = socket.socket(socket.AF_UNIX, kind)
    except OSError as exc:
        print("socket", kind, exc.errno)
        continue
    try:
        s.connect(address); s.send(b"REACHED"); print("REACHED", kind)
    except OSError as exc:
        try:
            s.sendto(b"REACHED", address); print("REACHED sendto", kind)
        except OSError:
            print("refused", kind, exc.errno)
for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
    try:
        a, _ = socket.socketpair(socket.AF_UNIX, kind)
        a.sendto(b"REACHED", address); print("REACHED pair", kind)
    except OSError as exc:
        print("pair refused", kind, exc.errno)
"""


class HostSocket:
    """A stream or datagram listener on the host; ``reached`` says if anything arrived."""

    def __init__(self, address: str | bytes, kind: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, kind)
        self.sock.bind(address)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(8)
        self.sock.setblocking(False)
        self.kind = kind

    def reached(self) -> bool:
        try:
            if self.kind == socket.SOCK_STREAM:
                self.sock.accept()
            else:
                self.sock.recv(64)
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()


def attack(runner: BwrapRunner, layout: Layout, target: str, mode: SandboxMode, network: bool) -> str:
    result = run(runner, [PY, "-c", UNIX_ATTACK, target, "-"], policy(layout.ws, mode, network=network))
    assert result.returncode == 0, result.err
    return result.out


@NETWORK
@BOTH_MODES
@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM], ids=["stream", "dgram"])
def test_socket_bound_with_a_relative_path(
    runner: BwrapRunner, layout: Layout, mode: SandboxMode, network: bool, kind: int
) -> None:
    """/proc/net/unix lists it as ``rel.sock``: nothing there says where it is."""
    here = os.getcwd()
    os.chdir(layout.ws)
    try:
        host = HostSocket("rel.sock", kind)
    finally:
        os.chdir(here)
    try:
        out = attack(runner, layout, str(layout.ws / "rel.sock"), mode, network)
        assert "REACHED" not in out, out
        assert not host.reached()
    finally:
        host.close()


@NETWORK
@BOTH_MODES
def test_abstract_socket_on_the_host(runner: BwrapRunner, layout: Layout, mode: SandboxMode, network: bool) -> None:
    name = f"dsh-test-{uuid.uuid4().hex}"
    host = HostSocket(b"\0" + name.encode(), socket.SOCK_STREAM)
    try:
        out = attack(runner, layout, "@" + name, mode, network)
        assert "REACHED" not in out, out
        assert not host.reached()
    finally:
        host.close()


@NETWORK
@pytest.mark.parametrize("where", ["workspace", "outside"])
def test_host_socket_created_during_the_run(
    runner: BwrapRunner, layout: Layout, network: bool, where: str
) -> None:
    """The command starts first and waits; the host binds afterwards."""
    directory = layout.ws if where == "workspace" else layout.outside
    path = directory / "late.sock"
    marker = layout.outside / "bound"
    launch = runner.prepare(
        [PY, "-c", UNIX_ATTACK, str(path), str(marker)], policy(layout.ws, network=network), cwd=str(layout.ws), env={}
    )
    assert isinstance(launch, LocalLaunch)
    hosts: list[HostSocket] = []
    try:
        proc = spawn(launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        await_line(proc.stdout.fileno(), b"waiting", "the sandbox to be up and polling for the marker")
        hosts.append(HostSocket(str(path), socket.SOCK_STREAM))
        marker.write_text("go")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "REACHED" not in out.decode(), out
        assert not any(h.reached() for h in hosts)
    finally:
        for h in hosts:
            h.close()
        if launch.cleanup is not None:
            launch.cleanup()


LOCAL_IPC = r"""
import socket, threading
a, b = socket.socketpair(); a.sendall(b"pair"); print(b.recv(4).decode())
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET); a.sendall(b"seqp"); print(b.recv(4).decode())
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
def serve():
    conn, _ = srv.accept(); conn.sendall(conn.recv(4))
threading.Thread(target=serve).start()
cli = socket.create_connection(srv.getsockname()); cli.sendall(b"tcp!"); print(cli.recv(4).decode())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
u.sendto(b"udp!", u.getsockname()); print(u.recv(4).decode())
import multiprocessing as mp
with mp.get_context("fork").Pool(2) as pool: print("pool", sum(pool.map(abs, [-1, -2])))
"""


@NETWORK
@BOTH_MODES
def test_local_ipc_keeps_working(runner: BwrapRunner, layout: Layout, mode: SandboxMode, network: bool) -> None:
    result = run(runner, [PY, "-c", LOCAL_IPC], policy(layout.ws, mode, network=network))
    assert result.out.split() == ["pair", "seqp", "tcp!", "udp!", "pool", "3"], result.err


FAMILIES = r"""
import ctypes, errno, socket, sys
def errno_of(family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close(); return 0
    except OSError as exc:
        return exc.errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_errno(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return 0 if rc >= 0 else ctypes.get_errno()
io_uring_setup, keyctl, add_key = (int(n) for n in sys.argv[1:4])
params = ctypes.create_string_buffer(120)
key_id = int(sys.argv[4])
print("vsock", errno_of(socket.AF_VSOCK, socket.SOCK_STREAM))
print("uevent", errno_of(socket.AF_NETLINK, socket.SOCK_RAW, 15))
print("audit", errno_of(socket.AF_NETLINK, socket.SOCK_RAW, 9))
print("packet", errno_of(socket.AF_PACKET, socket.SOCK_RAW))
print("route", errno_of(socket.AF_NETLINK, socket.SOCK_RAW, 0))
print("io_uring", sys_errno(io_uring_setup, 4, ctypes.addressof(params)))
buf = ctypes.create_string_buffer(256)
print("read_key", sys_errno(keyctl, 11, key_id, ctypes.addressof(buf), 256))  # KEYCTL_READ
print("describe_session", sys_errno(keyctl, 6, -3, ctypes.addressof(buf), 256))  # KEYCTL_DESCRIBE @s
print("add_user_key", sys_errno(add_key, ctypes.addressof(ctypes.create_string_buffer(b"user")),
      ctypes.addressof(ctypes.create_string_buffer(b"dsh-sandbox-planted")),
      ctypes.addressof(ctypes.create_string_buffer(b"x")), 1, -4))  # @u
"""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _keyctl(*args: int | bytes) -> int:
    nr = native_arch().numbers["keyctl"]
    conv = [ctypes.c_long(a) if isinstance(a, int) else ctypes.c_char_p(a) for a in args]
    return int(_libc.syscall(ctypes.c_long(nr), *conv))


@contextlib.contextmanager
def session_key(secret: bytes) -> Iterator[int]:
    """A user key with ``secret`` in the caller's session keyring, unlinked afterwards."""
    nr = native_arch().numbers["add_key"]
    name = f"dsh-test-{uuid.uuid4().hex}".encode()
    key = int(_libc.syscall(ctypes.c_long(nr), b"user", name, secret, ctypes.c_size_t(len(secret)), ctypes.c_long(-3)))
    if key < 0:
        pytest.fail(f"add_key on the host failed: {os.strerror(ctypes.get_errno())}")
    try:
        yield key
    finally:
        _keyctl(9, key, -3)  # KEYCTL_UNLINK from @s


def _planted_in_user_keyring() -> bool:
    nr = native_arch().numbers["keyctl"]
    found = _libc.syscall(ctypes.c_long(nr), ctypes.c_long(10), ctypes.c_long(-4), b"user", b"dsh-sandbox-planted",
                          ctypes.c_long(0))  # KEYCTL_SEARCH @u
    if found >= 0:
        _keyctl(9, int(found), -4)
    return bool(found >= 0)


@NETWORK
@BOTH_MODES
def test_kernel_objects_and_families_are_refused(
    runner: BwrapRunner, layout: Layout, mode: SandboxMode, network: bool
) -> None:
    numbers = native_arch().numbers
    with session_key(b"SESSION-SECRET") as key:
        argv = [PY, "-c", FAMILIES, *(str(numbers[n]) for n in ("io_uring_setup", "keyctl", "add_key")), str(key)]
        result = run(runner, argv, policy(layout.ws, mode, network=network))
    assert result.returncode == 0, result.err
    got = dict(line.split() for line in result.out.splitlines())
    assert {k: int(v) for k, v in got.items()} == {
        "vsock": errno.EACCES,
        "uevent": errno.EACCES,
        "audit": errno.EACCES,
        "packet": errno.EACCES,
        "route": 0,
        "io_uring": errno.ENOSYS,
        "read_key": errno.EPERM,
        "describe_session": errno.EPERM,
        "add_user_key": errno.EPERM,
    }, result.out
    assert not _planted_in_user_keyring()


def test_socket_churn_on_the_host_does_not_break_runs(runner: BwrapRunner, layout: Layout) -> None:
    """Host sockets coming and going (container shims do) never fail a run."""
    stop = threading.Event()
    churn_dir = Path("/tmp") / f"dsh-churn-{uuid.uuid4().hex}"
    churn_dir.mkdir()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            path = churn_dir / f"s{n % 20}.sock"
            with contextlib.suppress(OSError):
                path.unlink()
            s = socket.socket(socket.AF_UNIX)
            with contextlib.suppress(OSError):
                s.bind(str(path))
            s.close()
            n += 1

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        results = [run(runner, ["/bin/sh", "-c", "echo ok > out"], policy(layout.ws)) for _ in range(30)]
    finally:
        stop.set()
        worker.join(10)
        for p in churn_dir.iterdir():
            p.unlink()
        churn_dir.rmdir()
    failures = [(r.returncode, r.err) for r in results if r.returncode != 0 or r.err]
    assert failures == []
