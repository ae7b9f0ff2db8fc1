"""Host-shared kernel objects: SysV IPC, POSIX message queues, keyrings, unix sockets.

The host creates each object before the run and another one while the command
runs (the command waits for a marker file naming it); the command gets the ids
and names, as an attacker who lists ``/proc/sysvipc`` would.  Afterwards the
host checks, from outside, that nothing was attached, read, changed or created.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.linux.syscalls import native_arch
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import PY, RO, WW, finish, make_policy, start
from tests.support.wait import await_line

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]
NR = native_arch().numbers
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
IPC_CREAT, IPC_RMID = 0o1000, 0
# struct mq_attr {flags, maxmsg = 1, msgsize = 16, curmsgs, pad[4]}: tiny, so RLIMIT_MSGQUEUE is no limit
_MQ_ATTR = ctypes.create_string_buffer(struct.pack("8q", 0, 1, 16, 0, 0, 0, 0, 0), 64)
KEY_SPEC_SESSION, KEY_SPEC_USER = -3, -4
KEYCTL_UNLINK, KEYCTL_SEARCH = 9, 10

# The command: waits for the host's marker, then attacks every object it names.
ATTACK = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = dict(item.split('=') for item in sys.argv[1].split(','))
def call(name, *args):
    argv = [ctypes.c_long(int(NR[name]))] + [a if isinstance(a, (bytes, ctypes.Array)) else ctypes.c_long(a)
                                            for a in args]
    result = libc.syscall(*argv)
    return 'ok' if result >= 0 else f'errno={ctypes.get_errno()}'
buf = ctypes.create_string_buffer(64)
marker, made = sys.argv[2], sys.argv[3]
ipc_key = int(made.rsplit('-', 1)[1], 16)
print('waiting', flush=True)
while not os.path.exists(marker):
    time.sleep(0.02)
for line in open(marker).read().split():
    kind, value = line.split(':', 1)
    if kind == 'shm':
        print('shmat', call('shmat', int(value), 0, 0))
        print('shmctl-rm', call('shmctl', int(value), 0, 0))
    elif kind == 'msg':
        print('msgrcv', call('msgrcv', int(value), buf, 8, 0, 0o4000))
        print('msgsnd', call('msgsnd', int(value), buf, 1, 0o4000))
    elif kind == 'sem':
        print('semop', call('semop', int(value), bytes(6), 1))
    elif kind == 'mq':
        print('mq_open', call('mq_open', value.encode(), 2, 0, 0))
        print('mq_unlink', call('mq_unlink', value.encode()))
    elif kind == 'key':
        print('keyctl-read', call('keyctl', 11, int(value), buf, 64))
        print('keyctl-update', call('keyctl', 2, int(value), b'evil', 4))
        print('keyctl-revoke', call('keyctl', 3, int(value)))
# Objects that would outlive the command.
print('shmget', call('shmget', ipc_key, 4096, 0o1600))
print('msgget', call('msgget', ipc_key, 0o1600))
print('semget', call('semget', ipc_key, 1, 0o1600))
attr = ctypes.create_string_buffer(bytes(8) + (1).to_bytes(8, 'little') + (16).to_bytes(8, 'little') + bytes(40))
print('mq_create', call('mq_open', made.encode(), 0o102, 0o600, attr))
print('add_key', call('add_key', b'user', made.encode(), b'x', 1, -4))
print('add_key-session', call('add_key', b'user', made.encode(), b'x', 1, -3))
print('keyctl-join', call('keyctl', 1, b'dsh-sandbox-keyring'))  # JOIN_SESSION_KEYRING
"""


def _sys(name: str, *args: int | bytes | ctypes.Array[ctypes.c_char]) -> int:
    """The raw syscall (exact arguments, no libc name mangling); raises OSError."""
    converted = [a if isinstance(a, bytes | ctypes.Array) else ctypes.c_long(a) for a in args]
    result = int(_libc.syscall(ctypes.c_long(NR[name]), *converted))
    if result < 0:
        raise OSError(ctypes.get_errno(), f"{name}: {os.strerror(ctypes.get_errno())}")
    return result


def _sysvipc(kind: str, ident: int) -> dict[str, str]:
    with open(f"/proc/sysvipc/{kind}", encoding="ascii") as table:
        header = table.readline().split()
        for line in table:
            row = dict(zip(header, line.split(), strict=False))
            if int(row[{"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind]]) == ident:
                return row
    raise LookupError(ident)


class _HostObjects:
    """One of each object, made by the host; ``lines`` is what the marker tells the command."""

    def __init__(self, tag: str) -> None:
        self.made: list[tuple[str, int | bytes]] = []  # for remove(), even after a partial setup
        self.shm = self._made("shmctl", _sys("shmget", 0, 4096, IPC_CREAT | 0o600))
        self.msg = self._made("msgctl", _sys("msgget", 0, IPC_CREAT | 0o600))
        message = ctypes.create_string_buffer(b"\x01\x00\x00\x00\x00\x00\x00\x00host", 12)
        _sys("msgsnd", self.msg, message, 4, 0)
        self.sem = self._made("semctl", _sys("semget", 0, 1, IPC_CREAT | 0o600))
        self.mq = f"dsh-test-{tag}-{os.getpid()}"  # the raw syscall takes no leading slash
        self.mq_fd = self._made("close", _sys("mq_open", self.mq.encode(), os.O_CREAT | os.O_RDWR, 0o600, _MQ_ATTR))
        self.made.append(("mq_unlink", self.mq.encode()))
        self.keys = []
        for ring in (KEY_SPEC_USER, KEY_SPEC_SESSION):
            self.keys.append(_sys("add_key", b"user", f"{self.mq}-{ring}".encode(), b"payload", 7, ring))
            self.made.append((f"keyctl{ring}", self.keys[-1]))

    def _made(self, remover: str, ident: int) -> int:
        self.made.append((remover, ident))
        return ident

    @property
    def lines(self) -> str:
        keys = " ".join(f"key:{k}" for k in self.keys)
        return f"shm:{self.shm} msg:{self.msg} sem:{self.sem} mq:{self.mq} {keys}\n"

    def assert_untouched(self) -> None:
        shm = _sysvipc("shm", self.shm)
        assert (shm["nattch"], shm["atime"], shm["lpid"]) == ("0", "0", "0"), shm
        msg = _sysvipc("msg", self.msg)
        assert (msg["qnum"], msg["lrpid"], msg["lspid"]) == ("1", "0", str(os.getpid())), msg
        assert _sysvipc("sem", self.sem)["otime"] == "0"
        os.fstat(self.mq_fd)  # still open; its name must still resolve
        os.close(_sys("mq_open", self.mq.encode(), os.O_RDONLY, 0, 0))
        # /proc/keys: flags (R = revoked), permissions and payload length, without needing possession.
        with open("/proc/keys", encoding="ascii") as keys:
            table = {int(line.split()[0], 16): line.split() for line in keys}
        for key in self.keys:
            row = table[key]
            assert "R" not in row[1] and row[4] == "3f010000" and row[-1] == "7", row

    def remove(self) -> None:
        for remover, ident in reversed(self.made):
            with contextlib.suppress(OSError):  # the unsandboxed control may have removed it
                if remover == "close":
                    os.close(int(ident))
                elif remover.startswith("keyctl"):
                    _sys("keyctl", KEYCTL_UNLINK, ident, int(remover[len("keyctl") :]))
                elif remover == "mq_unlink":
                    _sys("mq_unlink", ident)
                else:
                    _sys(remover, ident, IPC_RMID, 0)


def _made_name() -> str:
    return f"dsh-sandbox-made-{os.urandom(3).hex()}"


def _outlivers(made: str) -> list[tuple[str, int | bytes, int]]:
    """What the command made that still exists: (remover, id, ring or 0)."""
    ipc_key = int(made.rsplit("-", 1)[1], 16)
    found: list[tuple[str, int | bytes, int]] = []
    for getter, remover, args in (("shmget", "shmctl", (ipc_key, 0, 0)), ("msgget", "msgctl", (ipc_key, 0)),
                                  ("semget", "semctl", (ipc_key, 0, 0))):  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            found.append((remover, _sys(getter, *args), 0))
    with contextlib.suppress(FileNotFoundError):
        os.close(_sys("mq_open", made.encode(), os.O_RDONLY, 0, 0))
        found.append(("mq_unlink", made.encode(), 0))
    for ring in (KEY_SPEC_USER, KEY_SPEC_SESSION):
        with contextlib.suppress(OSError):
            found.append(("keyctl", _sys("keyctl", KEYCTL_SEARCH, ring, b"user", made.encode(), 0), ring))
    return found


def _remove(found: list[tuple[str, int | bytes, int]]) -> None:
    for remover, ident, ring in found:
        if remover == "keyctl":
            _sys("keyctl", KEYCTL_UNLINK, ident, ring)
        elif remover == "mq_unlink":
            _sys("mq_unlink", ident)
        else:
            _sys(remover, ident, IPC_RMID, 0)


@pytest.fixture
def host_objects() -> Iterator[tuple[_HostObjects, _HostObjects]]:
    made: list[_HostObjects] = []
    try:
        made.append(_HostObjects("before"))
        made.append(_HostObjects("during"))  # made now, revealed to the command only once it runs
        yield made[0], made[1]
    finally:
        for objects in made:
            objects.remove()


@pytest.mark.parametrize("mode", MODES)
def test_host_ipc_objects_and_keys_are_out_of_reach(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode, host_objects: tuple[_HostObjects, _HostObjects]
) -> None:
    ws, _ = layout
    before, during = host_objects
    marker = ws / "marker"
    numbers = ",".join(f"{k}={v}" for k, v in NR.items())
    made = _made_name()
    proc, launch = start(runner, make_policy(mode, ws), [PY, "-c", ATTACK, numbers, str(marker), made])
    assert proc.stdout is not None
    await_line(proc.stdout.fileno(), b"waiting", "the command to run and wait for the marker")
    (ws / "marker.tmp").write_text(before.lines + during.lines)
    (ws / "marker.tmp").rename(marker)
    try:
        result = finish(proc, launch)
    finally:
        leftovers = _outlivers(made)
        _remove(leftovers)
    lines = result.out.splitlines()
    assert len(lines) == 2 * (2 + 2 + 1 + 2 + 3 * 2) + 7, result.out + result.err
    for line in lines:
        assert line.split()[1] == f"errno={errno.EPERM}", line
    before.assert_untouched()
    during.assert_untouched()
    assert leftovers == []


def test_the_host_can_use_them_unsandboxed(layout: Layout, host_objects: tuple[_HostObjects, _HostObjects]) -> None:
    # The control: the same attack without the sandbox does reach the objects.
    marker = layout[0] / "marker"
    marker.write_text(host_objects[0].lines)
    numbers = ",".join(f"{k}={v}" for k, v in NR.items())
    made = _made_name()
    out = subprocess.run(
        [PY, "-c", ATTACK, numbers, str(marker), made], capture_output=True, text=True, timeout=60
    ).stdout
    leftovers = _outlivers(made)
    _remove(leftovers)
    assert "shmat ok" in out and "msgrcv ok" in out and "keyctl-read ok" in out, out
    assert {r for r, _i, _ring in leftovers} == {"shmctl", "msgctl", "semctl", "mq_unlink", "keyctl"}


SOCKETS = """
import os, socket, sys, time
marker = sys.argv[1]
print('waiting', flush=True)
while not os.path.exists(marker):
    time.sleep(0.02)
def attempt(label, fn):
    try:
        fn(); print(label, 'ok')
    except OSError as exc:
        print(label, f'errno={exc.errno}')
for path in open(marker).read().split():
    address = '\\0' + path[1:] if path.startswith('@') else path
    kind = {'dgram': socket.SOCK_DGRAM, 'stream': socket.SOCK_STREAM, 'seqpacket': socket.SOCK_SEQPACKET}[
        os.path.basename(path).split('-')[0].lstrip('@')]
    if kind == socket.SOCK_DGRAM:
        attempt('sendto', lambda: socket.socket(socket.AF_UNIX, kind).sendto(b'leak', address))
        stream = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        attempt('pair-sendto', lambda: stream[0].sendto(b'leak', address))
        pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        attempt('pair-sendmsg', lambda: pair[0].sendmsg([b'leak'], [], 0, address))
        attempt('dgram-pair', lambda: socket.socketpair(socket.AF_UNIX, kind))
    else:
        attempt('connect', lambda: socket.socket(socket.AF_UNIX, kind).connect(address))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.send(b'own'); print('own-pair', b.recv(8).decode())
"""


def _bound(kind: int, address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, kind)
    sock.bind(address)
    if kind != socket.SOCK_DGRAM:
        sock.listen(4)
    sock.setblocking(False)
    return sock


@pytest.mark.parametrize("mode", MODES)
def test_host_unix_sockets_are_out_of_reach(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    tag = f"{os.getpid()}-{os.urandom(3).hex()}"
    kinds = {"dgram": socket.SOCK_DGRAM, "stream": socket.SOCK_STREAM, "seqpacket": socket.SOCK_SEQPACKET}
    sockets = {f"{outside}/{name}-before": _bound(kind, f"{outside}/{name}-before") for name, kind in kinds.items()}
    sockets[f"@dgram-{tag}"] = _bound(socket.SOCK_DGRAM, f"\0dgram-{tag}")
    marker = ws / "marker"
    proc, launch = start(runner, make_policy(mode, ws), [PY, "-c", SOCKETS, str(marker)])
    try:
        assert proc.stdout is not None
        await_line(proc.stdout.fileno(), b"waiting", "the command to run and wait for the marker")
        sockets.update({f"{outside}/{n}-during": _bound(k, f"{outside}/{n}-during") for n, k in kinds.items()})
        (ws / "marker.tmp").write_text("\n".join(sockets))
        (ws / "marker.tmp").rename(marker)
        result = finish(proc, launch)
        lines = result.out.splitlines()
        assert lines[-1] == "own-pair own", result.out + result.err  # socketpairs work
        assert len(lines) == 3 * 4 + 4 + 1, result.out
        for line in lines[:-1]:
            # A connected pair ignores the address (its own peer at most): the host side below decides.
            if not line.startswith("pair-"):
                assert line.split()[1] == f"errno={errno.EACCES}", line
        for sock in sockets.values():
            with pytest.raises(BlockingIOError):
                sock.recv(16) if sock.type == socket.SOCK_DGRAM else sock.accept()
    finally:
        for sock in sockets.values():
            sock.close()
