"""Syscall numbers of the 64-bit ABIs the seccomp compiler supports.

Only the syscalls the rule model names.  x86_64 comes from
``arch/x86/entry/syscalls/syscall_64.tbl``; aarch64 uses the generic table
(``scripts/syscall.tbl``), which lacks the legacy path syscalls (``open``,
``chmod``, ``chown``, ``utime``...): those are listed as absent so that a
misspelt name in the rules is an error, not a silently missing rule.  Numbers from 424 up are
shared by every architecture.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

# The "new syscall" range (>= 424) has one number on every architecture.
_COMMON = {
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "pidfd_open": 434, "openat2": 437, "pidfd_getfd": 438, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
    "file_setattr": 469, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "mount_setattr": 442,
}  # fmt: skip

_X86_64 = {
    **_COMMON,
    "open": 2, "ioctl": 16, "shmget": 29, "shmat": 30, "shmctl": 31, "socket": 41, "connect": 42, "bind": 49,
    "listen": 50, "socketpair": 53, "kill": 62, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "fcntl": 72, "creat": 85, "chmod": 90, "fchmod": 91,
    "chown": 92, "fchown": 93, "lchown": 94, "ptrace": 101, "rt_sigqueueinfo": 129, "utime": 132, "mknod": 133,
    "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144, "setxattr": 188, "lsetxattr": 189,
    "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "tkill": 200,
    "sched_setaffinity": 203, "semtimedop": 220, "tgkill": 234, "utimes": 235, "mq_open": 240,
    "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
    "mq_getsetattr": 245, "add_key": 248, "request_key": 249, "keyctl": 250, "ioprio_set": 251,
    "openat": 257, "mknodat": 259, "fchownat": 260, "futimesat": 261, "fchmodat": 268, "utimensat": 280,
    "rt_tgsigqueueinfo": 297, "prlimit64": 302, "process_vm_readv": 310, "process_vm_writev": 311,
    "sched_setattr": 314, "clone": 56, "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166,
    "unshare": 272, "setns": 308, "sendto": 44, "sendmsg": 46, "sendmmsg": 307,
}  # fmt: skip

_AARCH64 = {
    **_COMMON,
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
    "fremovexattr": 16, "fcntl": 25, "ioctl": 29, "ioprio_set": 30, "mknodat": 33, "fchmod": 52, "fchmodat": 53,
    "fchownat": 54, "fchown": 55, "openat": 56, "utimensat": 88, "ptrace": 117, "sched_setparam": 118,
    "sched_setscheduler": 119, "sched_setaffinity": 122, "kill": 129, "tkill": 130, "tgkill": 131,
    "rt_sigqueueinfo": 138, "setpriority": 140, "mq_open": 180, "mq_unlink": 181,
    "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185,
    "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191,
    "semtimedop": 192, "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197,
    "socket": 198, "socketpair": 199, "bind": 200, "listen": 201, "connect": 203, "add_key": 217,
    "request_key": 218, "keyctl": 219, "rt_tgsigqueueinfo": 240, "prlimit64": 261, "process_vm_readv": 270,
    "process_vm_writev": 271, "sched_setattr": 274, "umount2": 39, "mount": 40, "pivot_root": 41, "chroot": 51,
    "unshare": 97, "clone": 220, "setns": 268, "sendto": 206, "sendmsg": 211, "sendmmsg": 269,
}  # fmt: skip


@dataclass(frozen=True)
class Arch:
    """One 64-bit syscall ABI: its ``AUDIT_ARCH_*`` value and syscall numbers."""

    name: str
    audit_arch: int
    # x86_64 also accepts x32 syscalls (number | 0x40000000): the filter kills them.
    has_x32: bool
    numbers: Mapping[str, int]
    absent: frozenset[str] = field(default_factory=frozenset)

    def number(self, syscall: str) -> int | None:
        """The syscall's number, ``None`` if this ABI has no such syscall."""
        nr = self.numbers.get(syscall)
        if nr is None and syscall not in self.absent:
            raise KeyError(f"no syscall number for {syscall!r} on {self.name}")
        return nr


ARCHES = {
    "x86_64": Arch("x86_64", 0xC000003E, True, _X86_64),
    "aarch64": Arch(
        "aarch64", 0xC00000B7, False, _AARCH64,
        frozenset({"chmod", "chown", "lchown", "utime", "utimes", "futimesat", "open", "creat", "mknod"}),
    ),
}  # fmt: skip


class UnsupportedArch(Exception):
    """The seccomp compiler has no syscall table for this machine."""


def native_arch() -> Arch:
    machine = platform.machine()
    arch = ARCHES.get(machine)
    if arch is None or ctypes.sizeof(ctypes.c_void_p) != 8:
        raise UnsupportedArch(
            f"the seccomp filter supports x86_64 and aarch64 (64-bit processes) only, "
            f"not {machine} ({ctypes.sizeof(ctypes.c_void_p) * 8}-bit)"
        )
    return arch
