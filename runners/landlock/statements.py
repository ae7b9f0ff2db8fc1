"""What the landlock runner states about itself: its hardening, the limitations
and the gap it reports, in ``explain`` and in refusals.  Text only."""

from __future__ import annotations

from dsh.runners.linux import seccomp
from dsh.sandbox.runner import Gap

HARDENING = (
    "no_new_privs: setuid/setgid bits and file capabilities grant nothing",
    "seccomp: foreign syscall ABIs (i386, x32) kill the process; refused: io_uring, kernel keyrings "
    "(keyctl, add_key, request_key), TIOCSTI/TIOCLINUX, inode flag changes (FS_IOC_SETFLAGS, "
    "FS_IOC_FSSETXATTR, file_setattr), SysV IPC and POSIX message queues (host-global: no IPC "
    "namespace), pidfd_send_signal, pidfd_getfd, and prlimit64, setpriority, ioprio_set and "
    "sched_set* on any process but the command's own (pid 0); signals, ptrace, process_vm_* and "
    "SIGIO owners naming the spawner thread are refused",
    "seccomp: no new namespace (unshare, setns, clone with CLONE_NEW*; clone3 is ENOSYS) and no mount API "
    "(mount, fsopen, fsmount, open_tree, move_mount, chroot, pivot_root...): a user namespace would hand the "
    "command every capability inside it",
    f"seccomp, in every constrained mode: refused: {seccomp.FILE_RULES_TEXT}",
    "host process made non-dumpable: children cannot read its /proc/<pid>/{environ,mem,fd}",
)
USER_HARDENING = ("capabilities: none (effective, permitted, inheritable and ambient sets empty)",)
ROOT_HARDENING = (
    "capabilities: none (effective, permitted, inheritable, ambient and bounding sets empty; securebits "
    "NOROOT and NO_SETUID_FIXUP locked): the command is uid 0 for file permissions only, so workspace "
    "files owned by another uid are writable only as their mode bits allow",
)
# Without network, pid and IPC namespaces, the host's objects of these kinds
# cannot be told apart from the command's own, so both are refused.
LOCAL_IPC = (
    "local IPC under landlock: pipes, FIFOs in writable roots, socketpair() (stream/seqpacket, e.g. "
    "multiprocessing.Pipe) and signals between the command's own processes work; unix socket servers "
    "(pathname or abstract), SysV IPC, POSIX message queues and anything needing a writable /dev/shm "
    "(POSIX semaphores: multiprocessing Pool, Lock, Manager) fail, and with the network off so does a "
    "loopback TCP/UDP test server: without namespaces these are the host's, not the command's own"
)

# Landlock cannot show another directory at /tmp, and the shared one holds
# other checkouts at any depth that the host's git runs hooks from.
PRIVATE_TMP = (
    "the host's /tmp stays read-only: Landlock cannot put the session's private directory there; "
    "$TMPDIR ({}) is writable and what honours it works (mktemp, Python's tempfile, pip, pytest's "
    "tmp_path, compilers); a literal /tmp path fails; tmp = \"shared\" in the profile makes the host's "
    "/tmp writable (searched at any depth)"
)

# Without a pid namespace the host's /proc is the command's: Landlock grants
# reading /proc as a whole (the command's own /proc/self is a directory that
# does not exist when the rules are made, so no rule could grant it alone), and
# argv, comm and status are world-readable.  Its ptrace restriction still keeps
# environ, mem, maps and fd of host processes out of reach.
PROCESS_LIST_GAP = Gap(
    "landlock-process-list",
    "cannot hide other processes: without a pid namespace every host process is listed in /proc, with its "
    "command line (secrets passed in argv), name, owner and state; its environ, mem and fd entries stay unreadable",
)

# Landlock's network rules name TCP ports, never addresses, and the command
# shares the host's network: the allowlist's proxy listens on the host's
# loopback, and the command may connect() to its port only.
NETWORK_PORT_GAP = Gap(
    "landlock-network-by-port",
    "with a network allowlist, Landlock limits connect() by TCP port, never by address: the command reaches the "
    "host's proxy, and also any other address that listens on the proxy's port (a server of its choosing that "
    "listens on every port), and any process of the host can use the proxy; a process that outlives the session "
    "(landlock-process-escape) keeps connect() to that port after the proxy is gone, to whatever listens there "
    "later; UDP, raw and unix sockets, bind() and listen() stay refused, for every socket family, so a unix-socket "
    "server inside the command fails (bwrap, gVisor and docker reach nothing but the proxy)",
)
