"""The shared seccomp rule model: compiled for both arches, and each rule checked on the real kernel.

Kernel checks run in a forked child that installs the filter on itself and
reports the errno of one syscall; the test process stays unfiltered.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import tempfile
from collections.abc import Callable

import pytest
from dsh.runners.linux import bpf, ioctls, seccomp
from dsh.runners.linux.seccomp import ALLOW, Arg, Rule, SyscallPolicy

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
ARCH = seccomp.native_arch()
LANDLOCK = SyscallPolicy()
BWRAP = SyscallPolicy(private_network=True, private_pid=True, private_ipc=True)


def _syscall(name: str, *args: int) -> int:
    """The errno of the raw syscall (0 on success)."""
    nr = ARCH.number(name)
    assert nr is not None
    result = _libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return ctypes.get_errno() if result < 0 else 0


def _errno_of(fn: Callable[[], object]) -> int:
    try:
        fn()
    except OSError as exc:
        return exc.errno or -1
    return 0


def filtered(policy: SyscallPolicy, probe: Callable[[], int]) -> int:
    """Run ``probe`` in a child under the filter for ``policy``; its errno, or -signal if killed."""
    program = bpf.compile_bpf(seccomp.rules(policy), ARCH)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            os.close(read_end)
            bpf.set_no_new_privs()
            bpf.install(program)
            os.write(write_end, struct.pack("i", probe()))
        except BaseException:
            code = 99
        os._exit(code)
    os.close(write_end)
    data = os.read(read_end, 4)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    assert os.WEXITSTATUS(status) == 0 and len(data) == 4
    value: int = struct.unpack("i", data)[0]
    return value


@pytest.mark.parametrize("arch", sorted(seccomp.ARCHES))
@pytest.mark.parametrize("policy", [LANDLOCK, BWRAP, SyscallPolicy(read_only=True, guard_tid=1234, network=True)])
def test_compiles_for_both_arches(arch: str, policy: SyscallPolicy) -> None:
    target = seccomp.ARCHES[arch]
    program = bpf.compile_bpf(seccomp.rules(policy), target)
    assert program[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch first
    assert program[1] == (0x15, 1, 0, target.audit_arch)
    assert program[2] == (0x06, 0, 0, 0x80000000)  # foreign arch: kill the process
    assert len(program) < 4096
    assert len(bpf.to_sock_filter_bytes(program)) == 8 * len(program)
    numbers = {ins[3] for ins in program if ins[0] == 0x15}
    assert {target.numbers["keyctl"], target.numbers["io_uring_setup"], 469} <= numbers


def test_unknown_syscall_name_is_an_error() -> None:
    with pytest.raises(KeyError, match="no syscall number"):
        bpf.compile_bpf((Rule("no_such_call", seccomp.refuse(errno.EPERM)),), ARCH)


def test_rules_are_data_for_other_renderers() -> None:
    bwrap = seccomp.rules(BWRAP)
    assert Rule("socket", ALLOW, (Arg(0, socket.AF_INET),)) in bwrap
    assert Rule("socket", ALLOW, (Arg(0, socket.AF_NETLINK), Arg(2, 0))) in bwrap
    assert not any(r.syscall in {"shmget", "prlimit64", "connect"} for r in bwrap)
    landlock = seccomp.rules(LANDLOCK)
    assert Rule("connect", seccomp.refuse(errno.EACCES)) in landlock
    assert not any(r.syscall == "socket" and r.action == ALLOW for r in landlock)
    assert not any(r.syscall in {"socket", "connect"} for r in seccomp.rules(SyscallPolicy(network=True)))


@pytest.mark.parametrize("policy", [LANDLOCK, BWRAP, SyscallPolicy(read_only=True, network=True)])
def test_every_unconditional_rule_refuses_on_the_kernel(policy: SyscallPolicy) -> None:
    # -1 everywhere: if the rule did not hold, the real syscall fails harmlessly.
    for rule in seccomp.rules(policy):
        if rule.args or rule.action == ALLOW or ARCH.number(rule.syscall) is None:
            continue
        got = filtered(policy, lambda name=rule.syscall: _syscall(name, -1, -1, -1, -1, -1, -1))  # type: ignore[misc]
        assert got == rule.action.errno, rule


def test_foreign_abi_is_killed() -> None:
    if not ARCH.has_x32:
        pytest.skip("SANDBOX_UNAVAILABLE: no x32 ABI on this arch")
    x32_getpid = 0x40000000 | 39
    assert filtered(LANDLOCK, lambda: _errno_of(lambda: _libc.syscall(ctypes.c_long(x32_getpid)))) == -signal.SIGSYS


def _socket(family: int, kind: int, proto: int = 0) -> Callable[[], int]:
    return lambda: _errno_of(lambda: socket.socket(family, kind, proto).close())


def _pair(kind: int) -> Callable[[], int]:
    return lambda: _errno_of(lambda: [s.close() for s in socket.socketpair(socket.AF_UNIX, kind)])


@pytest.mark.parametrize(
    ("policy", "probe", "expected"),
    [
        (LANDLOCK, _socket(socket.AF_UNIX, socket.SOCK_STREAM), errno.EACCES),
        (LANDLOCK, _socket(socket.AF_INET, socket.SOCK_STREAM), errno.EACCES),
        (LANDLOCK, _pair(socket.SOCK_STREAM), 0),
        (LANDLOCK, _pair(socket.SOCK_SEQPACKET), 0),
        (LANDLOCK, _pair(socket.SOCK_DGRAM), errno.EACCES),
        (LANDLOCK, _pair(3), errno.EACCES),  # SOCK_RAW is SOCK_DGRAM for AF_UNIX
        (SyscallPolicy(unix_sockets=True), _socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC), 0),
        (SyscallPolicy(unix_sockets=True), _socket(socket.AF_UNIX, socket.SOCK_SEQPACKET), 0),
        (SyscallPolicy(unix_sockets=True), _socket(socket.AF_UNIX, socket.SOCK_DGRAM), errno.EACCES),
        (BWRAP, _socket(socket.AF_INET, socket.SOCK_STREAM), 0),
        (BWRAP, _socket(socket.AF_INET6, socket.SOCK_DGRAM), 0),
        (BWRAP, _socket(socket.AF_NETLINK, socket.SOCK_RAW, 0), 0),  # NETLINK_ROUTE
        (BWRAP, _socket(socket.AF_NETLINK, socket.SOCK_RAW, 15), errno.EACCES),  # KOBJECT_UEVENT
        (BWRAP, _socket(40, socket.SOCK_STREAM), errno.EACCES),  # AF_VSOCK
        (BWRAP, _socket(17, socket.SOCK_DGRAM), errno.EACCES),  # AF_PACKET
        (BWRAP, _socket(socket.AF_UNIX, socket.SOCK_STREAM), errno.EACCES),
        (BWRAP, _pair(socket.SOCK_DGRAM), errno.EACCES),
        (SyscallPolicy(network=True), _socket(socket.AF_INET, socket.SOCK_DGRAM), 0),
        (SyscallPolicy(network=True), _pair(socket.SOCK_DGRAM), 0),
    ],
)
def test_socket_rules_on_the_kernel(policy: SyscallPolicy, probe: Callable[[], int], expected: int) -> None:
    assert filtered(policy, probe) == expected


def test_connect_refused_only_without_a_private_network() -> None:
    def connect() -> int:
        a, _b = socket.socketpair()
        return _errno_of(lambda: a.connect("/nonexistent-dsh-socket"))  # type: ignore[func-returns-value]

    assert filtered(LANDLOCK, connect) == errno.EACCES
    assert filtered(BWRAP, connect) != errno.EACCES


def test_sysv_ipc_and_mqueue_refused_without_an_ipc_namespace() -> None:
    ipc_private, ipc_creat, ipc_rmid = 0, 0o1000, 0

    def shm() -> int:
        nr = ARCH.number("shmget")
        seg = _libc.syscall(ctypes.c_long(nr), ctypes.c_long(ipc_private), ctypes.c_long(4096),
                            ctypes.c_long(ipc_creat | 0o600))  # fmt: skip
        if seg < 0:
            return ctypes.get_errno()
        _syscall("shmctl", seg, ipc_rmid, 0)
        return 0

    assert filtered(LANDLOCK, shm) == errno.EPERM
    assert filtered(BWRAP, shm) == 0  # in the namespace: allowed (this child's is the host's, removed above)
    assert filtered(LANDLOCK, lambda: _syscall("msgget", ipc_private, ipc_creat | 0o600)) == errno.EPERM
    assert filtered(LANDLOCK, lambda: _syscall("semget", ipc_private, 1, ipc_creat | 0o600)) == errno.EPERM


def test_keyrings_refused_everywhere() -> None:
    keyctl_get_keyring_id, key_spec_session = 0, -3
    for policy in (LANDLOCK, BWRAP):
        assert filtered(policy, lambda: _syscall("keyctl", keyctl_get_keyring_id, key_spec_session, 0)) == errno.EPERM


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (lambda: _syscall("prlimit64", 0, 7, 0, 0), 0),  # own RLIMIT_NOFILE: ulimit
        (lambda: _syscall("prlimit64", os.getppid(), 7, 0, 0), errno.EPERM),
        (lambda: _errno_of(lambda: os.setpriority(os.PRIO_PROCESS, 0, 1)), 0),  # nice
        (lambda: _errno_of(lambda: os.setpriority(os.PRIO_PROCESS, os.getpid(), 1)), errno.EPERM),
        (lambda: _errno_of(lambda: os.setpriority(os.PRIO_USER, 0, 1)), errno.EPERM),
        (lambda: _syscall("ioprio_set", 1, 0, 3 << 13), 0),  # ionice -c3 on itself
        (lambda: _syscall("ioprio_set", 1, os.getppid(), 3 << 13), errno.EPERM),
        (lambda: _syscall("ioprio_set", 3, 0, 3 << 13), errno.EPERM),  # IOPRIO_WHO_USER
        (lambda: _errno_of(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))), 0),  # taskset
        (lambda: _errno_of(lambda: os.sched_setaffinity(os.getppid(), {0})), errno.EPERM),
        (lambda: _syscall("sched_setscheduler", os.getppid(), 0, 0), errno.EPERM),
        (lambda: _syscall("sched_setparam", os.getppid(), 0), errno.EPERM),
        (lambda: _syscall("sched_setattr", os.getppid(), 0, 0), errno.EPERM),
    ],
)
def test_process_control_limited_to_itself(probe: Callable[[], int], expected: int) -> None:
    assert filtered(LANDLOCK, probe) == expected


def test_private_pid_namespace_keeps_process_control() -> None:
    assert filtered(BWRAP, lambda: _syscall("prlimit64", os.getppid(), 7, 0, 0)) != errno.EPERM


def test_guarded_tid() -> None:
    parent = os.getpid()  # a live task the child may not touch
    policy = SyscallPolicy(guard_tid=parent)
    assert filtered(policy, lambda: _errno_of(lambda: os.kill(parent, 0))) == errno.EPERM
    assert filtered(policy, lambda: _errno_of(lambda: os.kill(os.getpid(), 0))) == 0
    f_setown = 8
    assert filtered(policy, lambda: _syscall("fcntl", 0, f_setown, parent)) == errno.EPERM
    assert filtered(policy, lambda: _syscall("pidfd_open", parent, 0)) == errno.EPERM


@pytest.mark.parametrize("command", [0x40086602, 0x40046602, 0x401C5820, 0x5412])
def test_inode_flag_and_tty_ioctls_refused(command: int) -> None:
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as handle:
        flags = struct.pack("q", 0) + bytes(32)  # a valid buffer for every command above
        buffer = ctypes.create_string_buffer(flags)

        def probe() -> int:
            result = _libc.ioctl(handle.fileno(), ctypes.c_ulong(command), buffer)
            return ctypes.get_errno() if result < 0 else 0

        assert filtered(LANDLOCK, probe) == errno.EPERM
        assert filtered(BWRAP, probe) == errno.EPERM


def test_metadata_refused_in_read_only_only() -> None:
    with tempfile.NamedTemporaryFile() as handle:
        fd = handle.fileno()
        assert filtered(SyscallPolicy(read_only=True), lambda: _errno_of(lambda: os.fchmod(fd, 0o600))) == errno.EPERM
        assert filtered(LANDLOCK, lambda: _errno_of(lambda: os.fchmod(fd, 0o600))) == 0


_MODE_INDEX = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1,
               "mknod": 1, "mknodat": 2}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_MODE_INDEX))
@pytest.mark.parametrize("policy", [LANDLOCK, BWRAP], ids=["landlock", "bwrap"])
def test_setuid_and_setgid_modes_refused(name: str, policy: SyscallPolicy) -> None:
    if ARCH.number(name) is None:
        pytest.skip(f"SANDBOX_UNAVAILABLE: no {name} syscall on {ARCH.name}")

    def call(mode: int) -> int:
        args = [-1] * 6  # every other argument invalid: an allowed call fails harmlessly (EBADF, EFAULT)
        args[_MODE_INDEX[name]] = mode
        return filtered(policy, lambda: _syscall(name, *args))

    assert call(0o4755) == errno.EPERM
    assert call(0o2755) == errno.EPERM
    assert call(0o104755) == errno.EPERM  # a file type beside the bits (mknod)
    assert call(0o1777) not in (0, errno.EPERM)  # sticky and permission bits are fine


def test_openat2_is_absent_its_mode_being_behind_a_pointer() -> None:
    assert filtered(BWRAP, lambda: _syscall("openat2", -100, 0, 0, 0)) == errno.ENOSYS


def test_permission_changes_without_setid_bits_still_work() -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        path = os.path.join(folder, "f")

        def work() -> int:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            os.fchmod(fd, 0o755)
            os.close(fd)
            os.chmod(path, 0o1700)
            os.mknod(path + "-node", 0o100600)
            return 0

        assert filtered(LANDLOCK, work) == 0


def _ioctl_errno(fd: int, command: int) -> int:
    buffer = ctypes.create_string_buffer(4096)  # big enough for any argument struct
    result = _libc.ioctl(fd, ctypes.c_ulong(command), buffer)
    return ctypes.get_errno() if result < 0 else 0


def _variants(key: int) -> list[int]:
    # _IO, _IOW with a 4- and an 8-byte argument, _IOR, _IOWR: the handler is chosen by type and number.
    return [key, 0x40040000 | key, 0x40080000 | key, 0x80080000 | key, 0xC0100000 | key]


@pytest.mark.parametrize("name", sorted(ioctls.INODE_CHANGES) + sorted(ioctls.TERMINAL))
def test_inode_and_filesystem_ioctls_refused_on_a_read_only_fd(name: str) -> None:
    key = {**ioctls.INODE_CHANGES, **ioctls.TERMINAL}[name]
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as handle:
        fd = os.open(handle.name, os.O_RDONLY)
        try:
            for command in _variants(key):
                for policy in (LANDLOCK, BWRAP):
                    got = filtered(policy, lambda c=command: _ioctl_errno(fd, c))  # type: ignore[misc]
                    assert got == errno.EPERM, hex(command)
        finally:
            os.close(fd)


def _version_call(fd: int, command: int, value: int) -> tuple[int, int]:
    """(errno, value after) of ``FS_IOC_SETVERSION``/``FS_IOC_GETVERSION`` on ``fd``."""
    buffer = ctypes.c_long(value)
    return (_libc.ioctl(fd, ctypes.c_ulong(command), ctypes.byref(buffer)) and ctypes.get_errno()), buffer.value


def test_setversion_through_a_read_only_fd_works_unfiltered_and_is_refused_filtered() -> None:
    getversion, setversion = 0x80087601, 0x40087602
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as handle:
        fd = os.open(handle.name, os.O_RDONLY)
        try:
            err, _ = _version_call(fd, setversion, 0x5A5A)
            if err:
                pytest.skip(f"SANDBOX_UNAVAILABLE: FS_IOC_SETVERSION unsupported here ({os.strerror(err)})")
            assert _version_call(fd, getversion, 0) == (0, 0x5A5A)  # the control: it works through O_RDONLY
            assert filtered(LANDLOCK, lambda: _version_call(fd, setversion, 0x1234)[0]) == errno.EPERM
            assert _version_call(fd, getversion, 0) == (0, 0x5A5A)
        finally:
            os.close(fd)


@pytest.mark.parametrize(
    "command",
    [0x2, 0x541B, 0x5401, 0x5413, 0x80086601, 0x80087601, 0xC020660B, 0x40049409],
    ids=["FIGETBSZ", "FIONREAD", "TCGETS", "TIOCGWINSZ", "FS_IOC_GETFLAGS", "FS_IOC_GETVERSION", "FIEMAP", "FICLONE"],
)
def test_reading_ioctls_kept(command: int) -> None:
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as handle:
        fd = os.open(handle.name, os.O_RDONLY)
        try:
            assert filtered(LANDLOCK, lambda: _ioctl_errno(fd, command)) != errno.EPERM
        finally:
            os.close(fd)


def test_bind_and_listen_refused_without_a_private_network() -> None:
    name = f"\0dsh-seccomp-test-{os.getpid()}-{os.urandom(4).hex()}"

    def bind() -> int:
        a, _b = socket.socketpair()
        return _errno_of(lambda: a.bind(name))  # type: ignore[func-returns-value]

    def listen() -> int:
        a, _b = socket.socketpair()
        return _errno_of(lambda: a.listen(1))  # type: ignore[func-returns-value]

    assert filtered(LANDLOCK, bind) == errno.EACCES
    assert filtered(LANDLOCK, listen) == errno.EACCES
    assert filtered(BWRAP, bind) == 0  # its own network namespace: its own abstract names
    assert filtered(SyscallPolicy(unix_sockets=True), bind) == 0  # unix sockets asked for (servers included)
    assert filtered(SyscallPolicy(network=True), bind) == 0


def test_lease_refused_locks_and_dnotify_kept() -> None:
    f_setlease, f_notify, f_rdlck, dn_access = 1024, 1026, 0, 1
    shared = fcntl.LOCK_SH | fcntl.LOCK_NB
    with tempfile.NamedTemporaryFile(dir="/var/tmp") as handle:
        fd = os.open(handle.name, os.O_RDONLY)
        folder = os.open(os.path.dirname(handle.name), os.O_RDONLY)
        try:
            for policy in (LANDLOCK, BWRAP):
                assert filtered(policy, lambda: _syscall("fcntl", fd, f_setlease, f_rdlck)) == errno.EPERM
                assert filtered(policy, lambda: _syscall("fcntl", folder, f_notify, dn_access)) == 0
                assert filtered(policy, lambda: _errno_of(lambda: fcntl.flock(fd, fcntl.LOCK_SH))) == 0
                assert filtered(policy, lambda: _errno_of(lambda: fcntl.lockf(fd, shared))) == 0
        finally:
            os.close(fd)
            os.close(folder)


_CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWNS = 0x10000000, 0x40000000, 0x00020000
_SIGCHLD = 17


def _fork_with_clone(flags: int) -> int:
    """A raw ``clone(flags | SIGCHLD)`` whose child exits at once; its errno (0: it ran)."""
    nr = ARCH.number("clone")
    assert nr is not None
    pid = _libc.syscall(ctypes.c_long(nr), ctypes.c_long(flags | _SIGCHLD), *(ctypes.c_long(0) for _ in range(4)))
    if pid == 0:  # pragma: no cover - child
        os._exit(0)
    if pid < 0:
        return ctypes.get_errno()
    os.waitpid(pid, 0)
    return 0


@pytest.mark.parametrize("policy", [LANDLOCK, BWRAP], ids=["landlock", "bwrap"])
def test_no_new_namespace_and_no_mount(policy: SyscallPolicy) -> None:
    # Unfiltered, root (or a host allowing user namespaces) gets a user
    # namespace: the rule, not the caller's privileges, refuses it below.
    for flags in (_CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWNS, _CLONE_NEWUSER | _CLONE_NEWNS):
        assert filtered(policy, lambda f=flags: _syscall("unshare", f)) == errno.EPERM  # type: ignore[misc]
        assert filtered(policy, lambda f=flags: _fork_with_clone(f)) == errno.EPERM  # type: ignore[misc]
    assert filtered(policy, lambda: _syscall("setns", 0, 0)) == errno.EPERM
    assert filtered(policy, lambda: _syscall("clone3", 0, 0)) == errno.ENOSYS
    assert filtered(policy, lambda: _errno_of(lambda: os.chroot("/"))) == errno.EPERM
    for name in ("mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount",
                 "mount_setattr"):
        assert filtered(policy, lambda n=name: _syscall(n, 0, 0, 0, 0, 0)) == errno.EPERM, name  # type: ignore[misc]


def _threads_and_forks() -> int:
    import subprocess
    import threading

    box: list[int] = []
    worker = threading.Thread(target=lambda: box.append(1))
    worker.start()
    worker.join()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    done = subprocess.run(["/bin/sh", "-c", "exit 5"], check=False)
    ok = box == [1] and os.WEXITSTATUS(status) == 7 and done.returncode == 5 and _fork_with_clone(0) == 0
    return 0 if ok else 1


@pytest.mark.parametrize("policy", [LANDLOCK, BWRAP], ids=["landlock", "bwrap"])
def test_threads_fork_and_exec_still_work(policy: SyscallPolicy) -> None:
    assert filtered(policy, _threads_and_forks) == 0
