"""Process, network and privilege attacks against the bwrap runner."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import LocalLaunch

from tests.runners.bwrap.helpers import BOTH_MODES, Layout, policy, run, sh, spawn
from tests.support.processes import pids_where, pids_with
from tests.support.wait import wait_until

PY = sys.executable


def host_pids_with(marker: str) -> list[int]:
    """Host pids of processes running ``sleep <marker>`` (not of shells naming it)."""
    wanted = b"sleep\0" + marker.encode() + b"\0"
    return pids_where(lambda cmdline: cmdline == wanted or cmdline.endswith(b"/" + wanted))


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket]]:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    yield tcp, udp
    tcp.close()
    udp.close()


NET_PROBE = """
import socket, sys
tcp_port, udp_port = int(sys.argv[1]), int(sys.argv[2])
try:
    socket.create_connection(("127.0.0.1", tcp_port), timeout=10).close()
    print("TCP-CONNECTED")
except OSError as exc:
    print("tcp failed:", exc)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"LEAK", ("127.0.0.1", udp_port))
    print("udp sent")
except OSError as exc:
    print("udp failed:", exc)
try:
    socket.getaddrinfo("example.com", 80)
    print("DNS-RESOLVED")
except OSError as exc:
    print("dns failed:", exc)
print("interfaces:", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
"""


@BOTH_MODES
def test_network_off_reaches_nothing_outside(
    runner: BwrapRunner,
    layout: Layout,
    mode: SandboxMode,
    listeners: tuple[socket.socket, socket.socket],
) -> None:
    tcp, udp = listeners
    ports = [str(tcp.getsockname()[1]), str(udp.getsockname()[1])]
    result = run(runner, [PY, "-c", NET_PROBE, *ports], policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    assert "TCP-CONNECTED" not in result.out
    assert "DNS-RESOLVED" not in result.out
    assert "interfaces: ['lo']" in result.out
    with pytest.raises(BlockingIOError):
        tcp.accept()
    with pytest.raises(BlockingIOError):
        udp.recv(64)


def test_network_on_reaches_the_listener(
    runner: BwrapRunner, layout: Layout, listeners: tuple[socket.socket, socket.socket]
) -> None:
    """The control: the same probe does get through when the policy allows network."""
    tcp, udp = listeners
    ports = [str(tcp.getsockname()[1]), str(udp.getsockname()[1])]
    result = run(runner, [PY, "-c", NET_PROBE, *ports], policy(layout.ws, network=True))
    assert "TCP-CONNECTED" in result.out, result.out + result.err
    conn, _ = tcp.accept()
    conn.close()
    assert udp.recv(64) == b"LEAK"


@BOTH_MODES
def test_no_privileges_no_nested_namespaces_no_mounts(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    (layout.ws / "mnt").mkdir()
    script = """
        grep -q '^CapEff:[[:space:]]*0000000000000000$' /proc/self/status || exit 10
        grep -q '^CapBnd:[[:space:]]*0000000000000000$' /proc/self/status || exit 11
        grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status || exit 12
        unshare -U true && exit 13
        unshare -Ur true && exit 14
        unshare -m true && exit 15
        mount -t tmpfs none mnt && exit 16
        mount -o remount,rw / && exit 17
        mount --bind / mnt && exit 18
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    assert os.listdir(layout.ws / "mnt") == []


def test_setuid_binary_gains_nothing(runner: BwrapRunner, layout: Layout) -> None:
    cat = shutil.which("cat")
    assert cat is not None
    suid = layout.outside / "suid-cat"
    shutil.copy(cat, suid)
    os.chown(suid, 0, 0) if os.geteuid() == 0 else None
    suid.chmod(0o4755)
    result = run(runner, [str(suid), "/proc/self/status"], policy(layout.ws))
    assert result.returncode == 0, result.err
    status = dict(line.split(":", 1) for line in result.out.splitlines() if ":" in line)
    assert status["CapEff"].strip() == "0000000000000000"
    assert status["CapPrm"].strip() == "0000000000000000"
    assert status["NoNewPrivs"].strip() == "1"


@BOTH_MODES
def test_cannot_signal_a_host_process(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    victim = subprocess.Popen(["sleep", "600"])
    try:
        script = f"kill -TERM {victim.pid} && exit 10; kill -KILL {victim.pid} && exit 11; exit 0"
        result = sh(runner, script, policy(layout.ws, mode))
        assert result.returncode == 0, result.err
        assert victim.poll() is None, "the host process was signalled"
    finally:
        victim.kill()
        victim.wait()


TIOCSTI_SNIPPET = """
import fcntl, os, sys, termios
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    print("HAS-CONTROLLING-TTY")
except OSError as exc:
    print("no controlling tty:", exc)
try:
    for ch in b"INJECTED\\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([ch]))
    print("TIOCSTI-OK")
except OSError as exc:
    print("tiocsti failed:", exc)
"""


def _spawn_on_pty(argv: tuple[str | bytes, ...], pass_fds: tuple[int, ...],
                  spawn_in: Callable[[Callable[[], Any]], Any] | None = None) -> tuple[str, bytes]:
    """Run ``argv`` with a fresh pty as its controlling terminal; what got injected."""
    import termios
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)

    def make_controlling() -> None:
        import fcntl

        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=make_controlling,
            pass_fds=pass_fds,
        )

    try:
        proc: subprocess.Popen[bytes] = spawn_in(start) if spawn_in is not None else start()
        out, _ = proc.communicate(timeout=120)
        os.set_blocking(slave, False)
        try:
            injected = os.read(slave, 1024)
        except BlockingIOError:
            injected = b""
        return out.decode("utf-8", "replace"), injected
    finally:
        os.close(master)
        os.close(slave)


def test_tiocsti_cannot_inject_into_the_terminal(runner: BwrapRunner, layout: Layout) -> None:
    control_out, control_injected = _spawn_on_pty((PY, "-c", TIOCSTI_SNIPPET), ())
    if b"INJECTED" not in control_injected:
        pytest.skip(f"SANDBOX_UNAVAILABLE: TIOCSTI is disabled by this kernel even outside a sandbox: {control_out}")
    launch = runner.prepare([PY, "-c", TIOCSTI_SNIPPET], policy(layout.ws), cwd=str(layout.ws), env={})
    assert isinstance(launch, LocalLaunch)
    try:
        out, injected = _spawn_on_pty(launch.argv, launch.pass_fds, launch.spawn_in)
    finally:
        assert launch.cleanup is not None
        launch.cleanup()
    assert "HAS-CONTROLLING-TTY" not in out
    assert "TIOCSTI-OK" not in out
    assert b"INJECTED" not in injected


@BOTH_MODES
def test_double_forked_daemon_dies_with_the_sandbox(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    marker = f"3{uuid.uuid4().int % 10**6:06d}.5"
    script = f"setsid sh -c '(sleep {marker} &) ' </dev/null >/dev/null 2>&1; sleep 0; exit 0"
    result = sh(runner, script, policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    wait_until(lambda: not host_pids_with(marker), f"daemon 'sleep {marker}' to be gone")


def test_killing_bwrap_kills_everything_inside(runner: BwrapRunner, layout: Layout) -> None:
    """Once the sandbox runs, killing bwrap alone (not its group) ends everything."""
    marker = f"4{uuid.uuid4().int % 10**6:06d}.5"
    script = f"setsid sh -c '(sleep {marker} &)' </dev/null >/dev/null 2>&1; exec sleep 600"
    launch = runner.prepare(["/bin/sh", "-c", script], policy(layout.ws), cwd=str(layout.ws), env={})
    assert isinstance(launch, LocalLaunch)
    proc = spawn(launch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: host_pids_with(marker), "the daemon to start")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=120)
        wait_until(lambda: not host_pids_with(marker), f"daemon 'sleep {marker}' to be gone")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert launch.cleanup is not None
        launch.cleanup()


def test_kill_tree_right_after_spawn_leaves_nothing(runner: BwrapRunner, layout: Layout) -> None:
    """An abort in bwrap's first milliseconds must not orphan a running sandbox."""
    markers = [f"6{uuid.uuid4().int % 10**6:06d}.{i}" for i in range(12)]
    for marker in markers:
        script = f"setsid sh -c '(sleep {marker} &)' </dev/null >/dev/null 2>&1; exec sleep 600"
        launch = runner.prepare(["/bin/sh", "-c", script], policy(layout.ws), cwd=str(layout.ws), env={})
        assert isinstance(launch, LocalLaunch) and launch.kill_tree is not None
        proc = spawn(launch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            launch.kill_tree(proc.pid, signal.SIGKILL)
            proc.wait(timeout=120)
        finally:
            assert launch.cleanup is not None
            launch.cleanup()
    for marker in markers:
        wait_until(lambda m=marker: not pids_with(m), f"everything of {marker} gone")


def test_exact_argv_round_trips(runner: BwrapRunner, layout: Layout) -> None:
    args: list[str | bytes] = [
        "two words",
        "it's",
        'say "hi"',
        "$HOME `id` $(id)",
        "line1\nline2",
        "",
        b"\xff\xfenot-utf8",
        "tab\there",
        "*",
        "--",
        "-e",
        "ünïcödé",
    ]
    result = run(runner, ["printf", "%s\\0", *args], policy(layout.ws))
    assert result.returncode == 0, result.err
    expected = b"".join((a if isinstance(a, bytes) else a.encode()) + b"\0" for a in args)
    assert result.stdout == expected


def test_cwd_is_honoured(runner: BwrapRunner, layout: Layout) -> None:
    sub = layout.ws / "deep dir"
    sub.mkdir()
    result = run(runner, ["pwd"], policy(layout.ws), cwd=sub)
    assert result.out.strip() == str(sub)


def test_stdin_reaches_the_command(runner: BwrapRunner, layout: Layout) -> None:
    result = run(runner, ["cat"], policy(layout.ws), stdin=b"piped \x00 bytes")
    assert result.stdout == b"piped \x00 bytes"


def test_workspace_files_keep_the_callers_ownership(runner: BwrapRunner, layout: Layout) -> None:
    result = sh(runner, "echo x > owned.txt", policy(layout.ws))
    assert result.returncode == 0, result.err
    st = (layout.ws / "owned.txt").stat()
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


UNIX_PROBE = """
import socket, sys
for path in sys.argv[1:]:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        print("CONNECTED", path)
    except OSError as exc:
        print("refused", path, exc)
"""


@pytest.mark.parametrize("network", [False, True], ids=["net-off", "net-on"])
@BOTH_MODES
def test_host_unix_sockets_are_unreachable(
    runner: BwrapRunner, layout: Layout, mode: SandboxMode, network: bool
) -> None:
    """A read-only view does not stop connect(): host sockets are covered up."""
    listeners = []
    paths = [str(layout.outside / "host.sock"), str(layout.ws / "in-workspace.sock")]
    try:
        for path in paths:
            srv = socket.socket(socket.AF_UNIX)
            srv.bind(path)
            srv.listen(4)
            srv.setblocking(False)
            listeners.append(srv)
        targets = [*paths, *(p for p in ("/run/docker.sock",) if os.path.exists(p))]
        result = run(runner, [PY, "-c", UNIX_PROBE, *targets], policy(layout.ws, mode, network=network))
        assert result.returncode == 0, result.err
        assert "CONNECTED" not in result.out, result.out
        for srv in listeners:
            with pytest.raises(BlockingIOError):
                srv.accept()
    finally:
        for srv in listeners:
            srv.close()


def test_unix_sockets_are_socketpairs_only(runner: BwrapRunner, layout: Layout) -> None:
    """A pathname server of the command's own is refused too: the filter cannot tell it from a host daemon's."""
    code = """
import errno, socket
a, b = socket.socketpair(); a.sendall(b"pair"); print(b.recv(4).decode())
try:
    socket.socket(socket.AF_UNIX).bind("own.sock")
except OSError as exc:
    print("own", errno.errorcode[exc.errno])
"""
    result = run(runner, [PY, "-c", code], policy(layout.ws))
    assert result.out.split() == ["pair", "own", "EACCES"], result.err
    assert not (layout.ws / "own.sock").exists()
