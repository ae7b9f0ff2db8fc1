"""Scenarios against a hostile host: kernel objects the host shares with the command.

The host creates System V IPC objects, POSIX queues, keys, unix sockets of every
type and a terminal, before the run or while it runs (``during``: the command
prints the ready marker, the host creates the object, then the command reaches
for it).  Each verdict is the object's state on the host after the run.
"""

from __future__ import annotations

from dsh.cli.conformance import checks as c
from dsh.cli.conformance import hostile as h
from dsh.cli.conformance.model import Expect, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
OK: dict[str, Expect] = {"read-only": "ok", "workspace-write": "ok"}
PY = ("python3",)

# Every command below is Python run with ``python3 -c``; ``{...}`` are HostEnv
# fields (literal braces are doubled).
LIBC = "import ctypes, os, socket\nL = ctypes.CDLL(None, use_errno=True)\n"
# Announce readiness, then wait (bounded) for the host's mid-run object: the
# host writes "go" to the command's stdin once it exists (a file would not
# reach a sandbox that works on a copy of the workspace).
WAIT = ("print('DSH-READY', flush=True)\nimport select\n"
        "if select.select([0], [], [], 15)[0] and os.read(0, 8).startswith(b'go'): print('DSH-GO', flush=True)\n")
KEYS = ("import platform\nADD, KEYCTL = {{'x86_64': (248, 250), 'aarch64': (217, 219)}}[platform.machine()]\n"
        "L.syscall.restype = ctypes.c_long\nlong = ctypes.c_long\n")


def py(*parts: str) -> tuple[str, ...]:
    return ("python3", "-c", "".join(parts))


SHM = ("L.shmat.restype = ctypes.c_void_p\ni = L.shmget({ipc_key}, 0, 0)\na = L.shmat(i, None, 0) if i >= 0 else None\n"
       "if a not in (None, ctypes.c_void_p(-1).value): ctypes.memmove(a, b'pwned', 5)\nprint('shm', i, a)\n")
MQ = "fd = L.mq_open(b'{mq}', os.O_WRONLY)\nprint('mq', fd, L.mq_send(fd, b'pwn', 3, 0) if fd >= 0 else None)\n"
# Read the host key, rewrite it, and plant a new one in the same keyring.
KEY = ("for ring in (-4, -3):\n"
       "    s = L.syscall(long(KEYCTL), long(10), long(ring), b'user', b'{key_desc}', long(0))\n"
       "    buf = ctypes.create_string_buffer(256)\n"
       "    n = L.syscall(long(KEYCTL), long(11), long(s), buf, long(256)) if s > 0 else -1\n"
       "    print('key', ring, s, buf.raw[:max(n, 0)])\n"
       "    if s > 0: L.syscall(long(KEYCTL), long(2), long(s), b'pwned', long(5))\n"
       "    L.syscall(long(ADD), b'user', b'{key_desc}-in', b'x', long(1), long(ring))\n")
CONNECT = ("kind = {{'s': socket.SOCK_STREAM, 'd': socket.SOCK_DGRAM, 'q': socket.SOCK_SEQPACKET}}['{kind}']\n"
           "s = socket.socket(socket.AF_UNIX, kind)\n"
           "if kind == socket.SOCK_DGRAM: s.sendto(b'hi', '{sock}')\n"
           "else: s.connect('{sock}'); s.send(b'hi')\n")


def connect(kind: str) -> str:
    return CONNECT.replace("{kind}", kind[0])


def unix(sid: str, kind: str, purpose: str, **where: bool) -> Scenario:
    # Abstract sockets are what Landlock's scopes (ABI 6) keep in; older ABIs declare it.
    covers = ("unix-sockets", "no-scopes") if where.get("abstract") else ("unix-sockets",)
    return Scenario(sid, "unix-socket", purpose, py(LIBC, connect(kind)), BLOCKED,
                    setup=h.unix_socket(kind, **where), check_blocked=h.no_socket_hits, covers=covers, requires=PY)


def unix_during(sid: str, kind: str, purpose: str) -> Scenario:
    return Scenario(sid, "unix-socket", purpose, py(LIBC, WAIT, connect(kind)), BLOCKED,
                    setup=h.socket_name(kind), during=h.open_socket(kind), check_blocked=h.no_socket_hits,
                    covers=("unix-sockets",), requires=PY)


SCENARIOS: tuple[Scenario, ...] = (
    # -- System V IPC and POSIX message queues -------------------------------------------
    Scenario("ipc-shm-host", "ipc", "attach the host's System V shared memory and overwrite it",
             py(LIBC, SHM), BLOCKED, setup=h.shm, check_blocked=h.shm_intact, covers=("ipc",), requires=PY),
    Scenario("ipc-shm-during", "ipc", "attach a shared memory segment the host creates mid-run",
             py(LIBC, WAIT, SHM), BLOCKED, setup=h.names, during=h.shm, check_blocked=h.shm_intact,
             covers=("ipc",), requires=PY),
    Scenario("ipc-msg-host", "ipc", "send to the host's System V message queue",
             py(LIBC, "i = L.msgget({ipc_key}, 0)\nm = ctypes.create_string_buffer(b'\\1' + bytes(7) + b'pwn', 16)\n"
                      "print('msg', i, L.msgsnd(i, m, 3, 0o4000) if i >= 0 else None)\n"),
             BLOCKED, setup=h.msg, check_blocked=h.msg_empty, covers=("ipc",), requires=PY),
    Scenario("ipc-sem-host", "ipc", "set the host's System V semaphore",
             py(LIBC, "i = L.semget({ipc_key}, 0, 0)\nprint('sem', i, L.semctl(i, 0, 16, ctypes.c_int(0)))\n"),
             BLOCKED, setup=h.sem, check_blocked=h.sem_intact, covers=("ipc",), requires=PY),
    Scenario("ipc-mq-host", "ipc", "send to the host's POSIX message queue", py(LIBC, MQ), BLOCKED,
             setup=h.mq, check_blocked=h.mq_empty, covers=("ipc",), requires=PY),
    Scenario("ipc-mq-during", "ipc", "send to a POSIX message queue the host creates mid-run",
             py(LIBC, WAIT, MQ), BLOCKED, setup=h.names, during=h.mq, check_blocked=h.mq_empty,
             covers=("ipc",), requires=PY),
    Scenario("ipc-outlive", "ipc", "IPC objects the command creates do not outlive it on the host",
             py(LIBC, "print(L.shmget({ipc_key}, 4096, 0o1600), L.msgget({ipc_key}, 0o1600),"
                      " L.semget({ipc_key}, 1, 0o1600), L.mq_open(b'{mq}', os.O_RDWR | os.O_CREAT, 0o600, None))\n"),
             BLOCKED, setup=h.names, check_blocked=h.no_ipc_left, covers=("ipc",), requires=PY),
    # -- kernel keyrings ---------------------------------------------------------------------
    Scenario("key-user", "keyring", "read, rewrite and add keys in the host user's keyring (@u)",
             py(LIBC, KEYS, KEY), BLOCKED, setup=h.user_key,
             check_blocked=c.all_of(h.key_secret_kept, h.no_key_planted), covers=("keyring",), requires=PY),
    Scenario("key-session", "keyring", "read, rewrite and add keys in the caller's session keyring (@s)",
             py(LIBC, KEYS, KEY), BLOCKED, setup=h.session_key,
             check_blocked=c.all_of(h.key_secret_kept, h.no_key_planted), covers=("keyring",), requires=PY),
    Scenario("key-user-during", "keyring", "read a key the host adds to @u mid-run",
             py(LIBC, KEYS, WAIT, KEY), BLOCKED, setup=h.names, during=h.user_key,
             check_blocked=c.all_of(h.key_secret_kept, h.no_key_planted), covers=("keyring",), requires=PY),
    # -- unix sockets of every type ---------------------------------------------------------
    unix("unix-dgram-sendto", "dgram", "sendto() a host pathname datagram socket without connect()"),
    unix("unix-seqpacket", "seqpacket", "connect to a host seqpacket socket"),
    unix("unix-abstract-dgram", "dgram", "sendto() a host abstract datagram socket", abstract=True),
    unix("unix-relative-bind", "stream", "connect to a host socket bound by a relative path", relative=True),
    unix("unix-in-workspace", "stream", "connect to a host daemon's socket that lives in the workspace",
         inside=True),
    unix_during("unix-stream-during", "stream", "connect to a stream socket the host creates mid-run"),
    unix_during("unix-dgram-during", "dgram", "sendto() a datagram socket the host creates mid-run"),
    Scenario("pos-unix-own", "positive", "a unix socket the command creates itself keeps working",
             py(LIBC, "a = socket.socket(socket.AF_UNIX)\na.bind('\\0dshconf-own-{nonce}')\na.listen(1)\n"
                      "b = socket.socket(socket.AF_UNIX)\nb.connect('\\0dshconf-own-{nonce}')\n"
                      "b.send(b'ok')\nprint(a.accept()[0].recv(2).decode())\n"),
             OK, check_ok=c.stdout_is(b"ok\n"), requires=PY, covers=("local-ipc", "unix-sockets")),
    # -- the user's terminal -------------------------------------------------------------------
    Scenario("term-read", "terminal", "read what the user types on the host terminal",
             py(LIBC, "fd = os.open('{pty}', os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)\nprint(os.read(fd, 200))\n"),
             BLOCKED, setup=h.host_pty, check_blocked=h.terminal_untouched, covers=("terminal",), requires=PY),
    Scenario("term-write-inject", "terminal", "write to the user's terminal and push input into it (TIOCSTI)",
             py(LIBC, "import fcntl\nfd = os.open('{pty}', os.O_RDWR | os.O_NOCTTY)\n"
                      "os.write(fd, b'inject-{nonce}\\n')\n"
                      "for ch in b'sti-{nonce}\\n': fcntl.ioctl(fd, 0x5412, bytes([ch]))\n"),
             BLOCKED, setup=h.host_pty, check_blocked=h.terminal_untouched, covers=("terminal",), requires=PY),
)
