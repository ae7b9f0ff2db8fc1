"""A network namespace made for a sandbox, with a listening socket in it that the host holds.

For network by domain allowlist, the sandboxed command must reach nothing but
the host's allowlist proxy.  The namespace is made by the host, not by bwrap:

- a short-lived child (a fresh ``python -I -S``, never a fork of the host,
  which may have threads) unshares a network namespace (with a user
  namespace mapping only the caller when not root), brings its ``lo`` up,
  listens on ``127.0.0.1:PORT`` there, hands the listener and the
  namespace's fds back over ``SCM_RIGHTS``, and exits;
- the host serves that listener with the proxy (``NetworkProxy(sock=...)``):
  every connection it accepts comes from inside the namespace, and every
  connection it makes upstream leaves from the host's own namespace;
- the sandbox runs in the namespace (``enter_argv``: ``nsenter`` through the
  host's own fds, so the command inherits none) without a network namespace
  of its own: the only thing it can connect to is the proxy.

Nothing runs inside the sandbox for this (no bridge the command could kill
or replace), and no host port exists that another local user could reach.
The command cannot take the proxy's port (it is bound, without
``SO_REUSEPORT``) and cannot take ``lo`` down (no capability over the
namespace's owner).  The namespace lives as long as the host holds its fds or
a process runs in it: ``close`` releases the host's part, and nothing is
mounted, so a crash of the host leaks nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from dataclasses import dataclass

from dsh.sandbox.net_rules import NetworkRules

#: The port the command's proxy variables name: the namespace's own loopback,
#: so it never clashes with anything on the host.
PROXY_PORT = 3128
_CHILD_TIMEOUT_S = 10

# The child: standard library only, no site (-I -S), one job, then exit.
_CHILD = r"""
import ctypes, fcntl, os, socket, struct, sys
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
libc = ctypes.CDLL(None, use_errno=True)
port, own_userns, channel = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
uid, gid = os.getuid(), os.getgid()
if libc.unshare(CLONE_NEWNET | (CLONE_NEWUSER if own_userns else 0)) != 0:
    err = ctypes.get_errno()
    raise OSError(err, "unshare: " + os.strerror(err))
if own_userns:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH14x", fcntl.ioctl(ctl, SIOCGIFFLAGS, struct.pack("16sH14x", b"lo", 0)))[1]
fcntl.ioctl(ctl, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
ctl.close()
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", port))
listener.listen(128)
fds = [listener.fileno(), os.open("/proc/self/ns/net", os.O_RDONLY), os.open("/proc/self/ns/user", os.O_RDONLY)]
socket.send_fds(socket.socket(fileno=channel), [b"ok"], fds)
"""


# Enters the network namespace argv[1] and listens on 127.0.0.1:argv[2] there.
_LISTEN_IN = r"""
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
net, port, channel = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if libc.setns(net, 0x40000000) != 0:
    err = ctypes.get_errno()
    raise OSError(err, "setns: " + os.strerror(err))
os.close(net)
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", port))
listener.listen(128)
socket.send_fds(socket.socket(fileno=channel), [b"ok"], [listener.fileno()])
"""


# Enters the namespaces argv[1] (user, -1: none) and argv[2] (net), closes
# them, then execs argv[4:] (after "--").  Exit 125: nothing ran.
_ENTER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
user, net = int(sys.argv[1]), int(sys.argv[2])
for fd, kind in ((user, 0x10000000), (net, 0x40000000)):
    if fd >= 0 and libc.setns(fd, kind) != 0:
        sys.stderr.write("dsh-sandbox: cannot enter the network allowlist's namespace: "
                         + os.strerror(ctypes.get_errno()) + "\n")
        os._exit(125)
for fd in (user, net):
    if fd >= 0:
        os.close(fd)
os.execv(sys.argv[4], sys.argv[4:])
"""


@dataclass
class SandboxNetns:
    """The namespace, the proxy's listener in it, and what enters it."""

    listener: socket.socket  # listening on 127.0.0.1:port inside the namespace
    net_fd: int
    user_fd: int  # its owning user namespace (the host's own when root)
    own_userns: bool
    port: int

    @classmethod
    def create(cls, python: str, port: int = PROXY_PORT) -> SandboxNetns:
        """Make one (``python``: an interpreter to run the child with, e.g.
        the host's own).  Raises ``OSError`` saying why it could not."""
        own_userns = os.geteuid() != 0
        fds = _from_child(python, _CHILD, [str(port), "1" if own_userns else "0"], (), 3,
                          "cannot make a network namespace for the proxy")
        listener = socket.socket(fileno=fds[0])
        listener.setblocking(False)
        return cls(listener, fds[1], fds[2], own_userns, int(listener.getsockname()[1]))

    def enter_argv(self, python: str, fds: tuple[int, ...]) -> list[str]:
        """A prefix that runs the rest of an argv in this namespace; its
        process needs ``enter_fds`` (``pass_fds``).

        A small ``python -I -S`` enters the namespaces through the inherited
        fds, closes them and execs the rest: nothing reaches the command.
        Not ``nsenter --net=/proc/<pid>/fd/N``: a process that made itself
        non-dumpable (the Landlock runner does, for the whole process) has
        its ``/proc/<pid>/fd`` owned by root, out of its own user's reach.
        Without root the user namespace is entered too, keeping the caller's
        credentials (mapped to themselves there).  ``fds``: copies of
        ``enter_fds`` (in that order) that the launch owns."""
        user, net = (fds[0], fds[1]) if self.own_userns else (-1, fds[0])
        return [python, "-I", "-S", "-c", _ENTER, str(user), str(net), "--"]

    @property
    def enter_fds(self) -> tuple[int, ...]:
        return (self.user_fd, self.net_fd) if self.own_userns else (self.net_fd,)

    def proxy_env(self) -> dict[str, str]:
        return proxy_env(self.port)

    def close(self) -> None:
        self.listener.close()
        for fd in (self.net_fd, self.user_fd):
            if fd != -1:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.net_fd = self.user_fd = -1


def listen_in(python: str, net_fd: int, port: int = PROXY_PORT) -> socket.socket:
    """A listener on ``127.0.0.1:port`` inside the network namespace ``net_fd``
    (another sandbox's, e.g. a container's), made by a short-lived child that
    enters it; the caller serves it with the proxy.  Entering needs
    ``CAP_SYS_ADMIN`` over the namespace's owner (root, for a container the
    daemon made).  Raises ``OSError`` saying why it could not."""
    fds = _from_child(python, _LISTEN_IN, [str(net_fd), str(port)], (net_fd,), 1,
                      "cannot listen for the proxy in the sandbox's network namespace")
    listener = socket.socket(fileno=fds[0])
    listener.setblocking(False)
    return listener


def proxy_env(port: int = PROXY_PORT, credential: str | None = None) -> dict[str, str]:
    """The variables that send pip, npm, git and curl through the proxy
    (with ``credential`` as the password of a proxy that asks for one).

    The literal address, never ``localhost``: the command could listen on
    ``[::1]`` at the same port and catch a sibling's connections."""
    user = f"dsh:{credential}@" if credential is not None else ""
    http = f"http://{user}127.0.0.1:{port}"
    socks = f"socks5h://{user}127.0.0.1:{port}"
    env = {}
    for name, value in (("http_proxy", http), ("https_proxy", http), ("all_proxy", socks)):
        env[name] = env[name.upper()] = value
    env["no_proxy"] = env["NO_PROXY"] = ""
    return env


def plan_line(rules: NetworkRules, at: str = f"127.0.0.1:{PROXY_PORT}") -> str:
    """What ``explain`` says of a network limited to ``rules`` (``at``: where the proxy listens)."""
    never = f"; never {', '.join(rules.deny)}" if rules.deny else ""
    secrets = "".join(f"; {s.env} holds a placeholder the proxy replaces with the value in {s.header} to "
                      f"{', '.join(s.hosts)} only (TLS ended by the proxy, with a CA made for the session)"
                      for s in rules.secrets)
    return (f"allowlist: only through the host's proxy at {at} (HTTP, CONNECT, SOCKS5), to "
            + ", ".join(rules.allow) + never + secrets)


def _from_child(python: str, source: str, args: list[str], pass_fds: tuple[int, ...], count: int,
                what: str) -> list[int]:
    """Run ``source`` in a fresh ``python -I -S`` (never a fork of the host,
    which may have threads) with ``args`` and the channel's fd last; the
    ``count`` fds it sends back, not inheritable."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fds: list[int] = []
    try:
        proc = subprocess.Popen([python, "-I", "-S", "-c", source, *args, str(theirs.fileno())],
                                pass_fds=[*pass_fds, theirs.fileno()], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={})
        theirs.close()
        ours.settimeout(_CHILD_TIMEOUT_S)
        try:
            _msg, fds, _flags, _addr = socket.recv_fds(ours, 16, count)
        except OSError:
            fds = []
        try:
            err = proc.communicate(timeout=_CHILD_TIMEOUT_S)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1]
        if proc.returncode != 0 or len(fds) != count:
            lines = err.decode(errors="replace").strip().splitlines()
            raise OSError(f"{what}: {lines[-1] if lines else 'no fds'}")
    except BaseException:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    finally:
        ours.close()
        theirs.close()
    for fd in fds:
        os.set_inheritable(fd, False)
    return fds
