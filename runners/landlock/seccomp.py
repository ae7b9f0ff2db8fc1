"""A seccomp BPF filter built in Python for the Landlock runner.

Landlock (ABI 4+) only knows TCP.  With network off, this filter makes
``socket()`` and ``socketpair()`` fail with EACCES for every address family
except ``AF_UNIX`` (UDP, raw, IPv6, netlink, packet...).  It always also:

- checks the ``arch`` field: only the native x86_64 / aarch64 ABI passes; a
  foreign ABI (i386 via ``int 0x80``, x32) is killed, so ``socketcall`` and the
  32-bit syscall table cannot be used to get around the number checks;
- refuses ``io_uring_*`` (its SOCKET op would create sockets outside seccomp);
- refuses the ``TIOCSTI``/``TIOCLINUX`` ioctls (typing into the controlling tty).

The filter binds to the calling thread only (no TSYNC) and is inherited by
every child that thread forks.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
from dataclasses import dataclass

from dsh.runners.landlock import abi

# Classic BPF opcodes.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# struct seccomp_data offsets: nr, arch, instruction_pointer, args[6].  Only
# the low 32 bits of an argument are compared: the kernel reads ``int``/``unsigned
# int`` arguments (domain, ioctl cmd) from the low half and ignores the high half.
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LOW = 16
_OFF_ARG1_LOW = 24

_X32_SYSCALL_BIT = 0x40000000
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
_IO_URING = (425, 426, 427)  # setup, enter, register: same numbers on both arches


_PIDFD_OPEN = 434
_PIDFD_SEND_SIGNAL = 424
_PIDFD_GETFD = 438
_F_SETOWN = 8
_F_SETOWN_EX = 15
_FIOSETOWN = 0x8901
_SIOCSPGRP = 0x8902


@dataclass(frozen=True)
class Arch:
    name: str
    audit_arch: int
    socket: int
    socketpair: int
    ioctl: int
    has_x32: bool
    connect: int = 0
    # Syscalls whose pid/tid argument (index) is compared with the spawner tid.
    pid_args: tuple[tuple[int, int], ...] = ()
    fcntl: int = 0
    # chmod, chown, utime and xattr changes: Landlock has no right for file
    # metadata, so read-only mode refuses them here (nothing is writable anyway).
    metadata: tuple[int, ...] = ()


ARCHES = {
    "x86_64": Arch(
        "x86_64", 0xC000003E, socket=41, socketpair=53, ioctl=16, has_x32=True, fcntl=72, connect=42,
        # kill, rt_sigqueueinfo, tkill, pidfd_open (arg 0); tgkill,
        # rt_tgsigqueueinfo, ptrace (arg 1); process_vm_readv/writev (arg 0)
        pid_args=((62, 0), (129, 0), (200, 0), (_PIDFD_OPEN, 0), (234, 1), (297, 1),
                  (101, 1), (310, 0), (311, 0)),
        # chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat utime utimes
        # futimesat utimensat setxattr lsetxattr fsetxattr removexattr lremovexattr
        # fremovexattr setxattrat removexattrat
        metadata=(90, 91, 268, 452, 92, 93, 94, 260, 132, 235, 261, 280, 188, 189, 190, 197, 198, 199, 463, 466),
    ),
    "aarch64": Arch(
        "aarch64", 0xC00000B7, socket=198, socketpair=199, ioctl=29, has_x32=False, fcntl=25, connect=203,
        pid_args=((129, 0), (138, 0), (130, 0), (_PIDFD_OPEN, 0), (131, 1), (240, 1),
                  (117, 1), (270, 0), (271, 0)),
        # fchmod fchmodat fchmodat2 fchownat fchown utimensat setxattr lsetxattr
        # fsetxattr removexattr lremovexattr fremovexattr setxattrat removexattrat
        metadata=(52, 53, 452, 54, 55, 88, 5, 6, 7, 14, 15, 16, 463, 466),
    ),
}  # fmt: skip


class UnsupportedArch(Exception):
    """The seccomp filter has no syscall table for this machine."""


def native_arch() -> Arch:
    machine = platform.machine()
    arch = ARCHES.get(machine)
    if arch is None or ctypes.sizeof(ctypes.c_void_p) != 8:
        raise UnsupportedArch(
            f"the seccomp network filter supports x86_64 and aarch64 (64-bit processes) only, "
            f"not {machine} ({ctypes.sizeof(ctypes.c_void_p) * 8}-bit)"
        )
    return arch


class _Program:
    """A tiny assembler: instructions with symbolic jump targets."""

    def __init__(self) -> None:
        self._ops: list[tuple[int, str | int, str | int, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self._labels[name] = len(self._ops)

    def load(self, offset: int) -> None:
        self._ops.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, if_true: str | int, if_false: str | int = 0) -> None:
        self._ops.append((op, if_true, if_false, k))

    def ret(self, value: int) -> None:
        self._ops.append((_RET_K, 0, 0, value))

    def assemble(self) -> list[tuple[int, int, int, int]]:
        out = []
        for index, (code, jt, jf, k) in enumerate(self._ops):
            out.append((code, self._offset(index, jt), self._offset(index, jf), k))
        return out

    def _offset(self, index: int, target: str | int) -> int:
        if isinstance(target, int):
            return target  # relative already (0 = next instruction)
        delta = self._labels[target] - index - 1
        if not 0 <= delta <= 255:
            raise ValueError(f"BPF jump to {target} out of range")
        return delta


def build_filter(
    arch: Arch,
    *,
    block_network: bool,
    guard_tid: int | None = None,
    block_unix_connect: bool = False,
    block_metadata: bool = False,
) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples.

    ``guard_tid``: the spawner thread.  Its children share its Landlock domain,
    so Landlock's signal scope and ptrace rules let them signal it (and a
    signal to one thread can kill the whole host process) or attach to it;
    every syscall that names a task by pid refuses that tid.

    ``block_unix_connect`` (with ``block_network``): ``connect()`` fails with
    EACCES.  Only AF_UNIX sockets can exist then, and Landlock ABI <= 7 does
    not mediate connecting to a pathname socket such as a root daemon's
    (``/var/run/docker.sock`` would be a way out of any mode).

    ``block_metadata`` (read-only mode): chmod/chown/utime/xattr syscalls fail
    with EPERM; Landlock cannot restrict file metadata.
    """
    p = _Program()
    p.load(_OFF_ARCH)
    p.jump(_JEQ_K, arch.audit_arch, 0, "kill")
    p.load(_OFF_NR)
    if arch.has_x32:
        p.jump(_JGE_K, _X32_SYSCALL_BIT, "kill")
    for nr in (*_IO_URING, _PIDFD_SEND_SIGNAL, _PIDFD_GETFD):
        p.jump(_JEQ_K, nr, "enosys")
    p.jump(_JEQ_K, arch.ioctl, "ioctl")
    if block_metadata:
        for nr in arch.metadata:
            p.jump(_JEQ_K, nr, "eperm")
    if block_network:
        p.jump(_JEQ_K, arch.socket, "family")
        p.jump(_JEQ_K, arch.socketpair, "family")
        if block_unix_connect:
            p.jump(_JEQ_K, arch.connect, "eacces")
    if guard_tid is not None:
        for nr, index in arch.pid_args:
            p.jump(_JEQ_K, nr, f"pid-arg{index}")
        p.jump(_JEQ_K, arch.fcntl, "fcntl")
    p.ret(_RET_ALLOW)
    p.label("ioctl")
    p.load(_OFF_ARG1_LOW)
    p.jump(_JEQ_K, _TIOCSTI, "eperm")
    p.jump(_JEQ_K, _TIOCLINUX, "eperm")
    if guard_tid is not None:  # owners for SIGIO: the pid is behind a pointer
        p.jump(_JEQ_K, _FIOSETOWN, "eperm")
        p.jump(_JEQ_K, _SIOCSPGRP, "eperm")
    p.ret(_RET_ALLOW)
    if guard_tid is not None:
        for index in sorted({i for _nr, i in arch.pid_args}):
            p.label(f"pid-arg{index}")
            p.load(_OFF_ARG0_LOW + 8 * index)
            p.jump(_JEQ_K, guard_tid, "eperm", "allow")
        p.label("fcntl")
        p.load(_OFF_ARG1_LOW)
        p.jump(_JEQ_K, _F_SETOWN_EX, "eperm")
        p.jump(_JEQ_K, _F_SETOWN, 0, "allow")
        p.load(_OFF_ARG0_LOW + 16)
        p.jump(_JEQ_K, guard_tid, "eperm", "allow")
    if block_network:
        p.label("family")
        p.load(_OFF_ARG0_LOW)
        p.jump(_JEQ_K, socket.AF_UNIX, "allow", "eacces")
    p.label("allow")
    p.ret(_RET_ALLOW)
    p.label("eacces")
    p.ret(_RET_ERRNO | errno.EACCES)
    p.label("eperm")
    p.ret(_RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.ret(_RET_ERRNO | errno.ENOSYS)
    p.label("kill")
    p.ret(_RET_KILL_PROCESS)
    return p.assemble()


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install(program: list[tuple[int, int, int, int]]) -> None:
    """Install ``program`` on the calling thread (needs no_new_privs first)."""
    array = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    abi.prctl_seccomp_filter(ctypes.pointer(fprog))
