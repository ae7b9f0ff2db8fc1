"""One seccomp rule model for every Linux runner, rendered by one compiler.

``rules(SyscallPolicy(...))`` says, as data, which syscalls a constrained
command may not make in the environment the policy describes; ``compile_bpf``
(in ``bpf``) renders the rules as a classic BPF program (installed on a thread by
``install``, or handed to ``bwrap --seccomp FD`` as ``to_sock_filter_bytes``);
other renderers (a Docker seccomp profile) read the same ``Rule`` values.

Rule semantics: the rules of one syscall are tried in order; the first whose
argument conditions all hold decides (``ALLOW`` or an errno); a syscall no rule
matches is allowed.  Conditions compare the low 32 bits of an argument, masked:
every argument the rules look at is an ``int``/``unsigned int`` (family, type,
pid, ioctl command), and the kernel ignores the high half of those registers.
Every program also checks the ``arch`` field first: a foreign ABI (i386 via
``int 0x80``, x32) kills the process, so ``socketcall``/``ipc`` and the 32-bit
tables cannot get around the numbers.

Every constrained command gets:

- ``io_uring_*`` refused (its SOCKET/OPENAT ops would bypass this filter);
- ``keyctl``, ``add_key``, ``request_key`` refused: the user and session
  keyrings are the host's (no namespace separates them);
- the ioctls of ``dsh.runners.linux.ioctls`` refused: ``TIOCSTI``/``TIOCLINUX``
  (typing into the caller's terminal) and those that change an inode or a
  filesystem through any fd, a read-only one included (inode flags and
  generation, fs-verity, fscrypt, btrfs snapshots...); no LSM mediates them on
  regular files; ``file_setattr`` refused for the same reason (inode flags);
- setuid and setgid mode bits refused: ``chmod``/``fchmod``/``fchmodat``/
  ``fchmodat2`` and ``open``/``openat``/``creat``/``mknod``/``mknodat`` with
  ``S_ISUID`` or ``S_ISGID`` in the mode (``openat2``, whose mode is behind a
  pointer, is ENOSYS: callers fall back to ``openat``).  The command's uid owns
  what it creates, and changing one's own file's mode needs no capability: as
  root that would leave a setuid-root binary for every local user, as anyone
  else one that runs as them.  (A write by a process without ``CAP_FSETID``
  clears the bits again, so the file must get its content first: ``cp -p``,
  ``install -m 4755`` and ``tar`` all set the mode last.)  Directories lose
  ``chmod g+s`` with it.  File capabilities need ``CAP_SETFCAP``, which no
  constrained command has;
- ``fcntl(F_SETLEASE)`` refused: a lease on a host file the command owns (as
  root, most of them) through a read-only fd stalls every host writer for the
  lease-break time.  ``F_NOTIFY`` stays (it only reports accesses to a directory
  the command can read), and so do ``flock``/``F_SETLK``: build tools lock files
  in their caches, and a read lock on a readable host file only delays a host
  writer that takes the same advisory lock, for as long as the command runs;
- no new namespace and no mount: ``unshare`` and ``setns`` refused, ``clone``
  with any ``CLONE_NEW*`` flag refused (``clone3``, whose flags are behind a
  pointer, is ENOSYS: libc falls back to ``clone``), and the mount API
  (``mount``, ``umount2``, ``pivot_root``, ``chroot``, ``fsopen``,
  ``fsconfig``, ``fsmount``, ``fspick``, ``open_tree``, ``move_mount``,
  ``mount_setattr``) refused.  A new user namespace hands back every
  capability inside it, and with them the kernel surface only a namespace's
  root reaches (filesystem drivers through ``fsopen``, netfilter and routing
  in a new network namespace): bwrap closes it with ``--disable-userns`` and
  Docker's default profile refuses it, but a Landlock command shares the host's
  namespaces and would get it.  Threads and ``fork`` (``clone`` without those
  flags) keep working;
- ``read_only``: chmod/chown/utime/xattr changes refused (Landlock has no
  right for metadata).

With the network off, sockets: seccomp cannot read a sockaddr, so a
``socket(AF_UNIX)`` can reach any host daemon's pathname socket (and, without a
private network namespace, any abstract one, or squat an abstract name a host
client will later connect to).  Hence:

- without a private network namespace (Landlock): ``socket()`` is refused for
  every family, ``connect()`` is refused, and ``socketpair()`` gives AF_UNIX
  ``SOCK_STREAM``/``SOCK_SEQPACKET`` pairs only (a datagram socket could
  ``sendto()`` any pathname socket on the host, connected or not); ``bind()``
  and ``listen()`` are refused, or a socketpair's socket would squat an
  abstract name that a host daemon binds or a host client connects to;
- in a private network namespace (bwrap, docker): ``AF_INET``/``AF_INET6``
  (loopback only exists there) and ``AF_NETLINK`` with ``NETLINK_ROUTE`` (to
  configure that loopback) stay allowed; every other family (``AF_VSOCK``
  reaches the hypervisor, ``AF_PACKET``, other netlink protocols...) is refused;
- ``proxy_client`` (Landlock with a network allowlist): TCP sockets
  (``AF_INET``/``AF_INET6``, ``SOCK_STREAM``, protocol 0 or TCP) as well, and
  ``connect()``, which Landlock limits to the proxy's port; ``bind()``,
  ``listen()`` (which binds an ephemeral port on every address without the
  hook Landlock checks) and TCP Fast Open sends (a connect inside a send) stay
  refused;
- ``unix_sockets``: the runner keeps host pathname sockets out of reach by other
  means (its mount namespace) or the user asked for them (Landlock's
  ``unix_connect = "allow"``): ``socket(AF_UNIX)`` with ``SOCK_STREAM`` or
  ``SOCK_SEQPACKET`` is allowed, datagram still is not (the type is masked with
  0xf: ``SOCK_RAW`` is mapped to ``SOCK_DGRAM`` for AF_UNIX).

Local IPC that keeps working with the network off: pipes and FIFOs the command
creates in a writable root, ``socketpair()`` (stream/seqpacket, e.g. Python's
``multiprocessing.Pipe``), signals between its own processes, shared memory by
``mmap(MAP_SHARED)`` of its own files; in a private network namespace also TCP
and UDP on loopback (a test server); in a private IPC namespace also SysV IPC
and POSIX message queues.  Not working without those namespaces: pathname and
abstract unix sockets (servers the command starts itself included), SysV IPC,
POSIX message queues, and whatever needs a writable ``/dev/shm`` (POSIX
semaphores: ``multiprocessing.Pool``/``Lock``).

Without a private pid namespace (Landlock), the command shares the host's pid
space; Landlock's own ptrace restriction already keeps it from
``ptrace``/``process_vm_*``/``kcmp``/``pidfd_getfd``/``process_madvise``/
``migrate_pages``/``move_pages``/``get_robust_list``/``perf_event_open`` on
host processes (all go through the ptrace access check, which a process
outside the domain fails), and its signal scope (ABI 6) keeps it from
``kill``/``tgkill``/``pidfd_send_signal``/``F_SETOWN`` SIGIO.  What no LSM hook
of Landlock covers is refused here: ``prlimit64`` unless pid 0,
``setpriority``/``ioprio_set`` unless (process, 0), ``sched_set*`` unless pid 0
(so ``ulimit``, ``nice``, ``ionice``, ``taskset`` on the command itself work),
SysV IPC and POSIX message queues (host-global without an IPC namespace;
``shmdt`` stays: it only detaches from the caller's own address space, and
``shmat`` is refused).  ``guard_tid``: the Landlock spawner thread shares the
command's domain, so the scope does not protect it; every syscall that names a
task by pid refuses that tid.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from dsh.runners.linux import ioctls
from dsh.runners.linux.syscalls import ARCHES, Arch, UnsupportedArch, native_arch

__all__ = [
    "ALLOW", "ARCHES", "FILE_RULES_TEXT", "Action", "Arch", "Arg", "Rule", "SyscallPolicy",
    "UnsupportedArch", "namespace_rules", "native_arch", "refuse", "rules",
]  # fmt: skip


#: The file-related refusals every constrained command gets, as each runner's ``explain`` states them.
FILE_RULES_TEXT = (
    "setuid/setgid mode bits (chmod family; open, creat, mknod modes; openat2 is ENOSYS), ioctls that change "
    "an inode or a filesystem through a read-only fd (inode flags and version, fs-verity, fscrypt, dedupe, "
    "btrfs snapshots and subvolumes, filesystem freeze and shutdown), fcntl(F_SETLEASE)"
)


@dataclass(frozen=True)
class SyscallPolicy:
    """What the command's environment is, as far as the syscall filter cares."""

    network: bool = False
    private_network: bool = False
    private_pid: bool = False
    private_ipc: bool = False
    read_only: bool = False
    unix_sockets: bool = False
    proxy_client: bool = False
    guard_tid: int | None = None


@dataclass(frozen=True)
class Action:
    kind: Literal["allow", "errno"]
    errno: int = 0


ALLOW = Action("allow")


def refuse(err: int) -> Action:
    return Action("errno", err)


@dataclass(frozen=True)
class Arg:
    """Condition ``(arg[index] & mask) == value`` (``!=`` with ``op="ne"``), low 32 bits."""

    index: int
    value: int
    op: Literal["eq", "ne"] = "eq"
    mask: int = 0xFFFFFFFF


@dataclass(frozen=True)
class Rule:
    syscall: str
    action: Action
    args: tuple[Arg, ...] = ()


EACCES = refuse(errno.EACCES)
EPERM = refuse(errno.EPERM)
ENOSYS = refuse(errno.ENOSYS)

_F_SETOWN = 8
_F_SETOWN_EX = 15
_F_SETLEASE = 1024
_SETID_BITS = (0o4000, 0o2000)  # S_ISUID, S_ISGID
_PRIO_PROCESS = 0
_IOPRIO_WHO_PROCESS = 1
_NETLINK_ROUTE = 0
_SOCK_TYPE_MASK = 0xF
_MSG_FASTOPEN = 0x20000000
_FASTOPEN_FLAGS = (("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3))  # (syscall, index of its flags)

_IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")
_KEYRINGS = ("keyctl", "add_key", "request_key")
_SYSV_IPC = ("shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semctl",
             "semtimedop")  # fmt: skip
_MQUEUE = ("mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr")
_METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime", "utimes",
             "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
             "fremovexattr", "setxattrat", "removexattrat")  # fmt: skip
# (syscall, index of its pid/tid argument) for the spawner-thread guard.
_PID_ARGS = (("kill", 0), ("tkill", 0), ("rt_sigqueueinfo", 0), ("pidfd_open", 0), ("tgkill", 1),
             ("rt_tgsigqueueinfo", 1), ("ptrace", 1), ("process_vm_readv", 0), ("process_vm_writev", 0))  # fmt: skip
# (syscall, index of its mode argument) for the setuid/setgid refusal.
_MODE_ARGS = (("chmod", 1), ("fchmod", 1), ("fchmodat", 2), ("fchmodat2", 2), ("open", 2), ("openat", 3),
              ("creat", 1), ("mknod", 1), ("mknodat", 2))  # fmt: skip
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (CLONE_NEWTIME
# shares its bit with clone()'s exit signal: only unshare and clone3 take it).
_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_MOUNT_API = ("mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree",
              "move_mount", "mount_setattr")  # fmt: skip
_OWN_PID_ONLY = ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr")


def _unix_pair_types(syscall: str) -> tuple[Rule, ...]:
    return tuple(
        Rule(syscall, ALLOW, (Arg(0, socket.AF_UNIX), Arg(1, kind, mask=_SOCK_TYPE_MASK)))
        for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET)
    )


def _socket_rules(policy: SyscallPolicy) -> Iterable[Rule]:
    if policy.network:
        return
    if policy.private_network:
        yield Rule("socket", ALLOW, (Arg(0, socket.AF_INET),))
        yield Rule("socket", ALLOW, (Arg(0, socket.AF_INET6),))
        yield Rule("socket", ALLOW, (Arg(0, socket.AF_NETLINK), Arg(2, _NETLINK_ROUTE)))
    elif policy.proxy_client:
        # TCP only (Landlock mediates TCP connect() and bind() by port, no
        # other protocol: not UDP, SCTP or MPTCP).
        for family in (socket.AF_INET, socket.AF_INET6):
            for protocol in (0, socket.IPPROTO_TCP):
                yield Rule("socket", ALLOW, (Arg(0, family), Arg(1, socket.SOCK_STREAM, mask=_SOCK_TYPE_MASK),
                                             Arg(2, protocol)))
    if policy.unix_sockets:
        yield from _unix_pair_types("socket")
    yield Rule("socket", EACCES)
    yield from _unix_pair_types("socketpair")
    yield Rule("socketpair", EACCES)
    if policy.proxy_client and not policy.private_network:
        # listen() on an unbound TCP socket binds an ephemeral port on every
        # address without the bind hook Landlock checks (measured: a server
        # reachable from the network).  TCP Fast Open sends connect from
        # inside sendto()/sendmsg(): Landlock refuses them on the kernels
        # measured, and the filter keeps them refused whatever the kernel.
        yield Rule("listen", EACCES)
        yield Rule("bind", EACCES)
        for name, index in _FASTOPEN_FLAGS:
            yield Rule(name, EACCES, (Arg(index, _MSG_FASTOPEN, mask=_MSG_FASTOPEN),))
        return
    if not policy.private_network and not policy.unix_sockets:
        # Only socketpairs (already connected) can exist; an inherited
        # unconnected socket must not reach a host daemon either, nor any
        # socket take a name in the host's abstract namespace.
        yield from (Rule(name, EACCES) for name in ("connect", "bind", "listen"))


#: Calls that could stop or rewrite the pid namespace's init (bwrap's, docker-init):
#: a traced, stopped init never reaps the command, and the run waits forever.
_INIT_GUARDED = (("ptrace", 1), ("process_vm_writev", 0), ("process_vm_readv", 0))


def _process_rules(policy: SyscallPolicy) -> Iterable[Rule]:
    if policy.private_pid:
        yield from (Rule(name, EPERM, (Arg(index, 1),)) for name, index in _INIT_GUARDED)
    if not policy.private_pid:
        yield from (Rule(name, ENOSYS) for name in ("pidfd_send_signal", "pidfd_getfd"))
        for name in _OWN_PID_ONLY:
            yield Rule(name, ALLOW, (Arg(0, 0),))
            yield Rule(name, EPERM)
        yield Rule("setpriority", ALLOW, (Arg(0, _PRIO_PROCESS), Arg(1, 0)))
        yield Rule("setpriority", EPERM)
        yield Rule("ioprio_set", ALLOW, (Arg(0, _IOPRIO_WHO_PROCESS), Arg(1, 0)))
        yield Rule("ioprio_set", EPERM)
    tid = policy.guard_tid
    if tid is not None:
        yield from (Rule(name, EPERM, (Arg(index, tid),)) for name, index in _PID_ARGS)
        yield Rule("fcntl", EPERM, (Arg(1, _F_SETOWN_EX),))  # the owner is behind a pointer
        yield Rule("fcntl", EPERM, (Arg(1, _F_SETOWN), Arg(2, tid)))


def _ioctl_rules(policy: SyscallPolicy) -> Iterable[Rule]:
    commands = [*ioctls.TERMINAL.values(), *ioctls.INODE_CHANGES.values()]
    if policy.guard_tid is not None:
        commands += ioctls.SIGIO_OWNERS.values()
    return (Rule("ioctl", EPERM, (Arg(1, cmd, mask=ioctls.MASK),)) for cmd in commands)


def _file_rules() -> Iterable[Rule]:
    for name, index in _MODE_ARGS:
        yield from (Rule(name, EPERM, (Arg(index, bit, mask=bit),)) for bit in _SETID_BITS)
    yield Rule("openat2", ENOSYS)
    yield Rule("fcntl", EPERM, (Arg(1, _F_SETLEASE),))


def namespace_rules() -> Iterable[Rule]:
    """No new namespace, no mount: what bwrap's ``--disable-userns`` and
    Docker's default profile refuse, for every runner alike."""
    yield from (Rule(name, EPERM) for name in ("unshare", "setns", *_MOUNT_API))
    yield Rule("clone3", ENOSYS)
    yield from (Rule("clone", EPERM, (Arg(0, flag, mask=flag),)) for flag in _NS_FLAGS)


def rules(policy: SyscallPolicy) -> tuple[Rule, ...]:
    """The rules for a constrained command in the environment ``policy`` describes."""
    out: list[Rule] = [Rule(name, ENOSYS) for name in _IO_URING]
    out += (Rule(name, EPERM) for name in _KEYRINGS)
    out += _ioctl_rules(policy)
    out.append(Rule("file_setattr", EPERM))
    out += _file_rules()
    out += namespace_rules()
    if policy.read_only:
        out += (Rule(name, EPERM) for name in _METADATA)
    if not policy.private_ipc:
        out += (Rule(name, EPERM) for name in _SYSV_IPC + _MQUEUE)
    out += _socket_rules(policy)
    out += _process_rules(policy)
    return tuple(out)
