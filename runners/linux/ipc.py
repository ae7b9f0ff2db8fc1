"""Local IPC the shared seccomp rules refuse on runners with private namespaces.

bwrap and Docker give the command its own IPC and network namespaces, so SysV
IPC, POSIX queues, ``/dev/shm`` and loopback servers are the command's own and
keep working.  Pathname unix sockets are not namespaced: a seccomp filter cannot
read the address ``connect()`` names, so it cannot tell a socket the command
bound itself from a host daemon's (``/var/run/docker.sock`` inside a bound
workspace, a tmux server's in ``/tmp``, sockets created after the start).  The
rules therefore refuse ``socket(AF_UNIX)``; this is the work that refusal stops.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsh.sandbox.capability import UNIX_SOCKETS as _UNIX_SOCKETS

#: The capability name conformance scenarios use in ``covers``.
UNIX_SOCKETS = _UNIX_SOCKETS.name

UNIX_SOCKET_LIMITATION = (
    "unix socket servers the command starts itself (socket(AF_UNIX): multiprocessing Manager, a test "
    "suite's own unix-socket server) are refused: a syscall filter cannot tell them from a host daemon's "
    "socket reachable through the filesystem; socketpair(), pipes, /dev/shm, SysV IPC and loopback TCP/UDP "
    "servers work"
)


def namespaced_limitations(constrained: bool) -> Mapping[str, str]:
    """What a constrained command in private namespaces cannot do (runner ``limitations``)."""
    return {UNIX_SOCKETS: UNIX_SOCKET_LIMITATION} if constrained else {}
