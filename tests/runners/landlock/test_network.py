"""Network off: Landlock TCP rules + the seccomp family filter + scopes, against host listeners.

Every listener is checked afterwards without waiting on timing: a connection or
datagram that got through would already sit in the host socket's queue.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import RO, WW, make_policy, py
from tests.support.require import require_runner

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]

_TRY = (
    "import socket, sys\n"
    "def attempt(fn):\n"
    "    try:\n"
    "        fn()\n"
    "        return 'ok'\n"
    "    except OSError as exc:\n"
    "        return f'errno={exc.errno}'\n"
)


def _nothing_arrived(sock: socket.socket, kind: str) -> bool:
    sock.setblocking(False)
    try:
        if kind == "accept":
            conn, _ = sock.accept()
            conn.close()
        else:
            sock.recv(100)
    except BlockingIOError:
        return True
    return False


@pytest.fixture
def tcp_listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


@pytest.fixture
def udp_listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock


@pytest.mark.parametrize("mode", MODES)
def test_tcp_to_host_listener_is_blocked(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode, tcp_listener: socket.socket
) -> None:
    port = tcp_listener.getsockname()[1]
    code = _TRY + ("print(attempt(lambda: socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)))")
    result = py(runner, make_policy(mode, layout[0]), code, str(port))
    assert result.out.strip() == f"errno={errno.EACCES}", result.err
    assert _nothing_arrived(tcp_listener, "accept")


def test_tcp_works_when_the_policy_allows_network(
    runner: LandlockRunner, layout: Layout, tcp_listener: socket.socket
) -> None:
    port = tcp_listener.getsockname()[1]  # the control: the same client reaches the listener
    code = _TRY + "print(attempt(lambda: socket.create_connection(('127.0.0.1', int(sys.argv[1])))))"
    result = py(runner, make_policy(WW, layout[0], network=True), code, str(port))
    assert result.out.strip() == "ok", result.err
    assert not _nothing_arrived(tcp_listener, "accept")


@pytest.mark.parametrize("mode", MODES)
def test_udp_to_host_listener_is_blocked(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode, udp_listener: socket.socket
) -> None:
    port = udp_listener.getsockname()[1]
    code = _TRY + (
        "s = lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto("
        "b'leak', ('127.0.0.1', int(sys.argv[1])))\n"
        "print(attempt(s))"
    )
    result = py(runner, make_policy(mode, layout[0]), code, str(port))
    assert result.out.strip() == f"errno={errno.EACCES}", result.err
    assert _nothing_arrived(udp_listener, "recv")


@pytest.mark.parametrize("mode", MODES)
def test_every_family_is_refused_and_socketpair_works(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode
) -> None:
    code = _TRY + (
        "families = [('inet6', socket.AF_INET6, socket.SOCK_STREAM, 0),\n"
        "            ('inet6-udp', socket.AF_INET6, socket.SOCK_DGRAM, 0),\n"
        "            ('raw', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),\n"
        "            ('netlink', socket.AF_NETLINK, socket.SOCK_RAW, 0),\n"
        "            ('packet', socket.AF_PACKET, socket.SOCK_RAW, 0),\n"
        "            ('unix', socket.AF_UNIX, socket.SOCK_STREAM, 0)]\n"
        "for name, fam, kind, proto in families:\n"
        "    print(name, attempt(lambda: socket.socket(fam, kind, proto).close()))\n"
        "print('pair-inet', attempt(lambda: socket.socketpair(socket.AF_INET)))\n"
        "print('pair-dgram', attempt(lambda: socket.socketpair(socket.AF_UNIX, 2)))\n"  # SOCK_DGRAM
        "a, b = socket.socketpair(socket.AF_UNIX)\n"
        "a.sendall(b'ping'); print('pair-unix', b.recv(4).decode())\n"
    )
    result = py(runner, make_policy(mode, layout[0]), code)
    denied = f"errno={errno.EACCES}"
    assert result.out.splitlines() == [
        f"inet6 {denied}",
        f"inet6-udp {denied}",
        f"raw {denied}",
        f"netlink {denied}",
        f"packet {denied}",
        # A unix socket could reach any host daemon's pathname socket: only
        # socketpairs (connected at birth) remain.
        f"unix {denied}",
        f"pair-inet {denied}",
        f"pair-dgram {denied}",
        "pair-unix ping",
    ], result.err


@pytest.fixture(scope="module")
def unix_runner() -> Iterator[LandlockRunner]:
    """A runner that lets connect() through, so Landlock's own scoping is what is tested."""
    instance = LandlockRunner({"unix_connect": "allow"})
    require_runner("landlock", instance)
    yield instance
    instance.close()


@pytest.mark.parametrize("mode", MODES)
def test_host_daemon_unix_socket_is_out_of_reach(
    runner: LandlockRunner, unix_runner: LandlockRunner, layout: Layout, mode: SandboxMode
) -> None:
    ws, outside = layout
    path = outside / "daemon.sock"  # stands for /var/run/docker.sock
    code = _TRY + "print(attempt(lambda: socket.socket(socket.AF_UNIX).connect(sys.argv[1])))"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(4)
        result = py(runner, make_policy(mode, ws), code, str(path))
        assert result.out.strip() == f"errno={errno.EACCES}", result.err
        assert _nothing_arrived(listener, "accept")
        # Why the default denies: Landlock itself does not mediate this connect.
        allowed = py(unix_runner, make_policy(mode, ws), code, str(path))
        assert allowed.out.strip() == "ok", allowed.err
        cannot = unix_runner.explain(make_policy(mode, ws)).cannot
        assert any(c.startswith("connect() to pathname unix") for c in cannot)


def test_abstract_unix_socket_outside_is_scoped(unix_runner: LandlockRunner, layout: Layout) -> None:
    runner = unix_runner
    name = f"\0dsh-landlock-test-{os.getpid()}-{os.urandom(4).hex()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(name)
        listener.listen(4)
        code = _TRY + (
            "name = '\\0' + sys.argv[1]\n"
            "print('outside', attempt(lambda: socket.socket(socket.AF_UNIX).connect(name)))\n"
            # The same kind of socket inside the sandbox stays usable.
            "srv = socket.socket(socket.AF_UNIX); srv.bind(name + '-inner'); srv.listen(1)\n"
            "print('inside', attempt(lambda: socket.socket(socket.AF_UNIX).connect(name + '-inner')))\n"
        )
        result = py(runner, make_policy(WW, layout[0]), code, name[1:])
        assert result.out.splitlines() == [f"outside errno={errno.EPERM}", "inside ok"], result.err
        assert _nothing_arrived(listener, "accept")


def test_pathname_unix_socket_inside_workspace_works(unix_runner: LandlockRunner, layout: Layout) -> None:
    runner = unix_runner
    code = _TRY + (
        "srv = socket.socket(socket.AF_UNIX); srv.bind('sock'); srv.listen(1)\n"
        "print(attempt(lambda: socket.socket(socket.AF_UNIX).connect('sock')))\n"
    )
    result = py(runner, make_policy(WW, layout[0]), code)
    assert result.out.strip() == "ok", result.err
