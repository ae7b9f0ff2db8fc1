"""Host-side access to the kernel objects the hostile-host scenarios plant and judge.

System V IPC, POSIX message queues, keyrings, I/O priority and inode flags have
no wrapper in the standard library; these thin ``ctypes`` calls let the host
create an object before (or during) a run and read its state afterwards.
Everything here runs on the host, never inside a sandbox.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import platform
import struct
from functools import cache

IPC_CREAT, IPC_EXCL, IPC_NOWAIT, IPC_RMID = 0o1000, 0o2000, 0o4000, 0
GETVAL, SETVAL = 12, 16
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
KEYCTL_SEARCH, KEYCTL_READ, KEYCTL_UNLINK = 10, 11, 9
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IOC_FSGETXATTR = 0x801C581F
FS_NODUMP_FL = 0x40

# ioprio_get/ioprio_set are not in ``os``: their numbers per architecture.
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}


@cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> int:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def ipc_key(nonce: str, salt: int = 0) -> int:
    """A System V key unique to one scenario run (positive, below 2**31)."""
    return (int(nonce[:7], 16) + salt) | 0x10000000


# -- System V shared memory, message queues, semaphores -----------------------------
def shm_create(key: int, content: bytes) -> int:
    lib = libc()
    lib.shmat.restype = ctypes.c_void_p
    shmid = _check(lib.shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0o600), "shmget")
    addr = lib.shmat(shmid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "shmat")
    ctypes.memmove(addr, content, len(content))
    lib.shmdt(ctypes.c_void_p(addr))
    return shmid


def shm_read(key: int, size: int) -> bytes | None:
    """The first ``size`` bytes of the segment with ``key``, or None if there is none."""
    lib = libc()
    lib.shmat.restype = ctypes.c_void_p
    shmid = lib.shmget(key, 0, 0)
    if shmid == -1:
        return None
    addr = lib.shmat(shmid, None, 0o10000)  # SHM_RDONLY
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    data = ctypes.string_at(addr, size)
    lib.shmdt(ctypes.c_void_p(addr))
    return data


def shm_remove(key: int) -> bool:
    shmid = libc().shmget(key, 0, 0)
    return shmid != -1 and int(libc().shmctl(shmid, IPC_RMID, None)) == 0


def msg_create(key: int) -> int:
    return _check(libc().msgget(key, IPC_CREAT | IPC_EXCL | 0o600), "msgget")


def msg_pending(key: int) -> int:
    """How many messages wait in the queue with ``key`` (drained; -1 if there is none)."""
    lib = libc()
    qid = lib.msgget(key, 0)
    if qid == -1:
        return -1
    buf = ctypes.create_string_buffer(8 + 256)
    n = 0
    while lib.msgrcv(qid, buf, 256, 0, IPC_NOWAIT) != -1:
        n += 1
    return n


def msg_remove(key: int) -> bool:
    qid = libc().msgget(key, 0)
    return qid != -1 and int(libc().msgctl(qid, IPC_RMID, None)) == 0


def sem_create(key: int, value: int) -> int:
    lib = libc()
    semid = _check(lib.semget(key, 1, IPC_CREAT | IPC_EXCL | 0o600), "semget")
    _check(lib.semctl(semid, 0, SETVAL, ctypes.c_int(value)), "semctl")
    return semid


def sem_value(key: int) -> int | None:
    lib = libc()
    semid = lib.semget(key, 0, 0)
    return None if semid == -1 else lib.semctl(semid, 0, GETVAL)


def sem_remove(key: int) -> bool:
    semid = libc().semget(key, 0, 0)
    return semid != -1 and int(libc().semctl(semid, 0, IPC_RMID)) == 0


# -- POSIX message queues --------------------------------------------------------
class _MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]


def mq_create(name: str) -> None:
    attr = _MqAttr(0, 4, 128, 0)
    fd = _check(libc().mq_open(name.encode(), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, ctypes.byref(attr)),
                "mq_open")
    os.close(fd)


def mq_messages(name: str) -> int:
    """Messages waiting in the queue ``name`` (-1 if there is none)."""
    fd = libc().mq_open(name.encode(), os.O_RDONLY)
    if fd == -1:
        return -1
    attr = _MqAttr()
    try:
        _check(libc().mq_getattr(fd, ctypes.byref(attr)), "mq_getattr")
    finally:
        os.close(fd)
    return int(attr.curmsgs)


def mq_remove(name: str) -> bool:
    return int(libc().mq_unlink(name.encode())) == 0


# -- keyrings --------------------------------------------------------------------
def _arg(value: int | bytes) -> ctypes.c_long | bytes:
    # Variadic ctypes calls pass a Python int as a C int: widen it, or pointers
    # and negative keyring ids arrive truncated.
    return ctypes.c_long(value) if isinstance(value, int) else value


def _keyctl(op: int, *args: int | bytes) -> int:
    lib = libc()
    lib.syscall.restype = ctypes.c_long
    return int(lib.syscall(ctypes.c_long(_syscall_no("keyctl")), ctypes.c_long(op), *map(_arg, args)))


def _syscall_no(name: str) -> int:
    table = {"x86_64": {"add_key": 248, "keyctl": 250}, "aarch64": {"add_key": 217, "keyctl": 219}}
    return table[platform.machine()][name]


def key_add(description: str, payload: bytes, keyring: int) -> int:
    lib = libc()
    lib.syscall.restype = ctypes.c_long
    args: tuple[int | bytes, ...] = (b"user", description.encode(), payload, len(payload), keyring)
    return _check(int(lib.syscall(ctypes.c_long(_syscall_no("add_key")), *map(_arg, args))), "add_key")


def key_find(description: str, keyring: int) -> int | None:
    serial = _keyctl(KEYCTL_SEARCH, keyring, b"user", description.encode(), 0)
    return None if serial == -1 else serial


def key_read(serial: int) -> bytes | None:
    buf = ctypes.create_string_buffer(512)
    n = _keyctl(KEYCTL_READ, serial, ctypes.addressof(buf), 512)
    return None if n < 0 else buf.raw[: min(n, 512)]


def key_remove(description: str, keyring: int) -> None:
    serial = key_find(description, keyring)
    if serial is not None:
        _keyctl(KEYCTL_UNLINK, serial, keyring)


# -- processes and inodes --------------------------------------------------------
def ioprio(pid: int) -> int:
    lib = libc()
    lib.syscall.restype = ctypes.c_long
    return _check(int(lib.syscall(ctypes.c_long(_IOPRIO_GET[platform.machine()]), ctypes.c_long(1),
                                  ctypes.c_long(pid))), "ioprio_get")


def inode_flags(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return int(struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8))[0])
    finally:
        os.close(fd)


def fsxattr(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return bytes(fcntl.ioctl(fd, FS_IOC_FSGETXATTR, b"\0" * 28))
    finally:
        os.close(fd)
