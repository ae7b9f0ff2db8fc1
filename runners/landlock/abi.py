"""A small ctypes binding to the Landlock syscalls and ``prctl``.

Only what the runner needs: the ABI version query, ruleset creation, path and
port rules, ``landlock_restrict_self`` and a few ``prctl`` options.  Constants
are the stable Linux uapi values (``linux/landlock.h``); the syscall numbers
444-446 are the same on x86_64 and aarch64 (the "new syscall" range is shared).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2


# Filesystem rights, with the ABI that introduced each one.
FS_RIGHTS: dict[str, tuple[int, int]] = {
    "EXECUTE": (1 << 0, 1),
    "WRITE_FILE": (1 << 1, 1),
    "READ_FILE": (1 << 2, 1),
    "READ_DIR": (1 << 3, 1),
    "REMOVE_DIR": (1 << 4, 1),
    "REMOVE_FILE": (1 << 5, 1),
    "MAKE_CHAR": (1 << 6, 1),
    "MAKE_DIR": (1 << 7, 1),
    "MAKE_REG": (1 << 8, 1),
    "MAKE_SOCK": (1 << 9, 1),
    "MAKE_FIFO": (1 << 10, 1),
    "MAKE_BLOCK": (1 << 11, 1),
    "MAKE_SYM": (1 << 12, 1),
    "REFER": (1 << 13, 2),
    "TRUNCATE": (1 << 14, 3),
    "IOCTL_DEV": (1 << 15, 5),
}
NET_RIGHTS: dict[str, tuple[int, int]] = {
    "BIND_TCP": (1 << 0, 4),
    "CONNECT_TCP": (1 << 1, 4),
}
SCOPES: dict[str, tuple[int, int]] = {
    "ABSTRACT_UNIX_SOCKET": (1 << 0, 6),
    "SIGNAL": (1 << 1, 6),
}


def _bit(name: str) -> int:
    return FS_RIGHTS[name][0]


FS_EXECUTE = _bit("EXECUTE")
READ_FILE = _bit("READ_FILE")
FS_READ = _bit("READ_FILE") | _bit("READ_DIR")
FS_READ_DIR = _bit("READ_DIR")
FS_TRUNCATE = _bit("TRUNCATE")
FS_IOCTL_DEV = _bit("IOCTL_DEV")
FS_WRITE_FILE = _bit("WRITE_FILE")
FS_WRITE = (
    sum(_bit(n) for n in FS_RIGHTS if n.startswith(("MAKE_", "REMOVE_")))
    | _bit("WRITE_FILE")
    | _bit("REFER")
    | _bit("TRUNCATE")
)
# Rights that make sense on a non-directory; the kernel rejects the others
# (EINVAL) for a rule whose fd is not a directory.
FS_FILE_RIGHTS = FS_EXECUTE | _bit("READ_FILE") | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def rights_for_abi(table: dict[str, tuple[int, int]], abi: int) -> int:
    """The mask of rights from ``table`` that ABI ``abi`` knows."""
    return sum(bit for bit, since in table.values() if since <= abi)


def names_of(table: dict[str, tuple[int, int]], mask: int) -> tuple[str, ...]:
    return tuple(name for name, (bit, _since) in table.items() if mask & bit)


def unsupported(table: dict[str, tuple[int, int]], abi: int) -> tuple[str, ...]:
    """Names of the rights in ``table`` the running ABI lacks (dropped, reported)."""
    return tuple(f"{name} (needs ABI {since})" for name, (_bit, since) in table.items() if since > abi)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the uapi struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1  # the uapi struct is __attribute__((packed)): 16 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int


class LandlockError(OSError):
    """A Landlock syscall failed; ``errno`` is the kernel's answer."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The running kernel's Landlock ABI; raises ``LandlockError`` with the errno."""
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    return _check(result, "landlock_create_ruleset(VERSION)")


def create_ruleset(abi: int, handled_fs: int, handled_net: int, scoped: int) -> int:
    """A ruleset fd; the struct size matches what ``abi`` knows (older kernels
    reject fields they do not know only when non-zero, but stay exact)."""
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(size),
        ctypes.c_uint32(0),
    )
    return _check(result, "landlock_create_ruleset")


def _add_rule(ruleset_fd: int, rule_type: int, attr: ctypes.Structure, what: str) -> None:
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_ADD_RULE),
        ctypes.c_int(ruleset_fd),
        ctypes.c_int(rule_type),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    _check(result, f"landlock_add_rule({what})")


def add_path_rule(ruleset_fd: int, path_fd: int, allowed: int) -> None:
    _add_rule(ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, _PathBeneathAttr(allowed, path_fd), "PATH_BENEATH")


def add_net_port_rule(ruleset_fd: int, port: int, allowed: int) -> None:
    """Allow ``allowed`` (NET_RIGHTS bits) for TCP ``port`` (ABI 4)."""
    _add_rule(ruleset_fd, LANDLOCK_RULE_NET_PORT, _NetPortAttr(allowed, port), "NET_PORT")


def restrict_self(ruleset_fd: int) -> None:
    """Enforce the ruleset on the *calling thread* (and its future children)."""
    result = _syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))
    _check(result, "landlock_restrict_self")


PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24

def _prctl_checked(option: int, arg: int, what: str) -> None:
    result = _prctl(
        ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
        ctypes.c_ulong(0),
    )  # fmt: skip
    _check(result, what)


def set_process_undumpable() -> None:
    """``PR_SET_DUMPABLE 0`` for the whole process.

    A sandboxed child shares the Landlock domain of the spawner thread, and
    the thread shares this process's memory: without this, the child could
    read ``/proc/<pid>/environ`` or ``/proc/<pid>/task/<tid>/mem`` of its
    parent.  Non-dumpable processes are only inspectable with CAP_SYS_PTRACE,
    which sandboxed commands do not have (see ``drop_all_capabilities``).
    """
    _prctl_checked(PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE, 0)")


PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# NOROOT: uid 0 gains no capability at exec; NO_SETUID_FIXUP: a setuid()
# between 0 and another uid changes none; both locked so no child undoes them.
SECUREBITS_LOCKED_NOROOT = 0b1111


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def drop_all_capabilities(*, as_root: bool) -> None:
    """Leave the calling thread (and what it spawns) with no capability at all.

    Root's commands would otherwise keep capabilities that override file
    permissions and ownership outside the Landlock rules' reach (chown,
    CAP_LINUX_IMMUTABLE, module loading...).  Capabilities are per thread, so
    this only touches the spawner thread.  Order matters: securebits and the
    bounding set need CAP_SETPCAP, which ``capset`` drops last.  Without
    ``as_root`` (an unprivileged caller has no CAP_SETPCAP) only the ambient,
    effective, permitted and inheritable sets are cleared: no_new_privs already
    keeps exec from granting file capabilities or a setuid root.
    """
    if as_root:
        try:
            with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
                last = int(f.read())
        except (OSError, ValueError):
            last = 63
        _prctl_checked(PR_SET_SECUREBITS, SECUREBITS_LOCKED_NOROOT, "prctl(PR_SET_SECUREBITS)")
        for cap in range(last + 1):
            _prctl_checked(PR_CAPBSET_DROP, cap, f"prctl(PR_CAPBSET_DROP, {cap})")
    _prctl_checked(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: effective, permitted, inheritable
    _check(_libc.capset(ctypes.byref(header), data), "capset(0)")


def set_thread_name(name: str) -> None:
    """``prctl(PR_SET_NAME)``: the OS-level name (``/proc/<tid>/status``), max 15 bytes."""
    pr_set_name = 15
    buffer = ctypes.create_string_buffer(name.encode()[:15])
    _prctl(ctypes.c_int(pr_set_name), buffer, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


@dataclass(frozen=True)
class AbiStatus:
    """Outcome of the ABI query: an ABI, or why Landlock cannot be used."""

    abi: int | None
    reason: str | None = None


def _kernel_release() -> tuple[int, int]:
    try:
        major, minor = platform.release().split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def _seccomp_active() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Seccomp:"):
                    return line.split()[1] != "0"
    except OSError:
        pass
    return False


def interpret_abi_errno(err: int, *, kernel: tuple[int, int] | None = None, seccomp_active: bool | None = None) -> str:
    """What a person can do when the ABI query failed with ``err``.

    ``kernel`` and ``seccomp_active`` default to this machine's values; tests
    pass them to check each explanation.
    """
    release = kernel if kernel is not None else _kernel_release()
    filtered = seccomp_active if seccomp_active is not None else _seccomp_active()
    kernel_text = f"{release[0]}.{release[1]}"
    if err == errno.EOPNOTSUPP:
        return (
            f"Landlock is built into kernel {kernel_text} but disabled at boot: "
            "add lsm=landlock (appended to the current LSM list) to the kernel command line"
        )
    if err == errno.EPERM:
        return (
            "the Landlock syscalls are blocked (EPERM), most likely by a container seccomp "
            "profile: allow landlock_create_ruleset/add_rule/restrict_self in the profile "
            "(e.g. docker run --security-opt seccomp=<profile>)"
        )
    if err == errno.ENOSYS:
        if release < (5, 13):
            return f"kernel {kernel_text} is too old for Landlock: it needs Linux >= 5.13"
        if filtered:
            return (
                f"the Landlock syscalls return ENOSYS on kernel {kernel_text}, which knows them: "
                "a container seccomp profile blocks them, "
                "or the kernel lacks CONFIG_SECURITY_LANDLOCK"
            )
        return f"kernel {kernel_text} was built without Landlock (CONFIG_SECURITY_LANDLOCK=n)"
    return f"landlock_create_ruleset failed: {os.strerror(err)} (errno {err})"


def query_abi() -> AbiStatus:
    try:
        return AbiStatus(abi_version())
    except LandlockError as exc:
        return AbiStatus(None, interpret_abi_errno(exc.errno or 0))
