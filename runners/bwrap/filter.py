"""The seccomp filter bwrap installs on the command (``--seccomp FD``).

What it refuses comes from the shared rule model (``dsh.runners.linux.seccomp``):
keyrings (the caller's user and session keyrings are the host's), io_uring,
setuid/setgid modes, inode-changing ioctls and leases (for a root caller, uid 0
in the sandbox is the host's root, and the host's files are its own), terminal
injection, and every socket family but IP and route netlink: ``AF_VSOCK``
reaches the hypervisor, other netlink protocols the host kernel, and
``socket(AF_UNIX)`` could ``connect()`` or ``sendto()`` any host pathname
socket the read-only view shows (a read-only mount does not stop either),
whether it was bound before the command started or after, by an absolute path
or a relative one.  ``socketpair()`` (stream and seqpacket) and loopback
TCP/UDP keep local IPC working.

The filter is the same with the network on: the host's unix sockets are not
"the network", and daemons such as ``/run/docker.sock`` are a way out of any
sandbox.  (Abstract sockets need ``socket(AF_UNIX)`` too.)

The program is compiled once per process and kept in one sealed memfd, shared
by every runner (it depends on the machine alone; one per runner leaked a
descriptor for every session a long-lived process opened); each launch
passes bwrap a fresh open file description of it (``/proc/self/fd``), because
bwrap reads the fd to its end and concurrent launches must not share an offset.
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass

from dsh.runners.linux import bpf, seccomp

#: The environment bwrap gives a constrained command, as the filter sees it.
BWRAP_SYSCALLS = seccomp.SyscallPolicy(
    network=False,  # IP sockets are allowed either way; see the module docstring
    private_network=True,
    private_pid=True,
    private_ipc=True,
)

DEGRADATION = "bwrap-syscall-filter"

_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


@dataclass(frozen=True)
class SyscallFilter:
    """A compiled filter in a sealed memfd, or why there is none."""

    memfd: int | None
    reason: str | None = None

    def open_for_launch(self) -> int:
        """A new read-only fd at offset 0 (the caller closes it after the launch)."""
        if self.memfd is None:
            raise RuntimeError("no syscall filter")  # enforcement() refuses such a launch first
        return os.open(f"/proc/self/fd/{self.memfd}", os.O_RDONLY | os.O_CLOEXEC)



_built: SyscallFilter | None = None
_lock = threading.Lock()


def build_filter() -> SyscallFilter:
    """The rules for this machine, compiled once per process; ``memfd=None``
    with the reason when impossible.  The memfd lives as long as the process."""
    global _built
    with _lock:
        if _built is None:
            _built = _compile()
        return _built


def _compile() -> SyscallFilter:
    try:
        arch = seccomp.native_arch()
    except seccomp.UnsupportedArch as exc:
        return SyscallFilter(None, str(exc))
    program = bpf.to_sock_filter_bytes(bpf.compile_bpf(seccomp.rules(BWRAP_SYSCALLS), arch))
    fd = os.memfd_create("dsh-bwrap-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(program)
        while view:
            view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return SyscallFilter(fd)


def describe() -> str:
    return (
        f"seccomp: keyrings, io_uring, TIOCSTI, new namespaces and the mount API refused; {seccomp.FILE_RULES_TEXT} "
        "refused; sockets: IP "
        "(loopback only when the network is off) and route netlink; socketpair() stream/seqpacket; "
        "socket(AF_UNIX) refused (no host unix socket, pathname or abstract, is reachable; nor a server the "
        "command starts), AF_VSOCK, other netlink and packet sockets refused"
    )
