"""Network by domain allowlist for docker: the host's proxy listens inside the container.

The container keeps ``network_mode=none`` (its own namespace, only ``lo``).
Once it runs, a short-lived child enters that namespace through the container
init's ``/proc/<pid>/ns/net`` and listens on ``127.0.0.1:3128`` there
(``dsh.runners.linux.net_namespace.listen_in``); the host's allowlist proxy
serves that listener.  Every connection the command makes to the proxy is
accepted on the host, and every connection upstream leaves from the host's
own namespace: the command can reach nothing else.

Entering a namespace the daemon made needs root.  Without root (a member of
the ``docker`` group), the listener is made by a helper exec'd in the
container as the container's user, which is the caller's own uid: it binds
``127.0.0.1:3128``, prints the descriptor's number and waits; the host takes
the descriptor with ``pidfd_getfd`` (allowed over a process of one's own uid,
unless Yama's ``ptrace_scope`` forbids it) and kills the helper.  Either way
nothing of ours stays in the container (no bridge the command could kill or
replace), and the command cannot take the proxy's port, which is bound before
any command runs.  With the daemon elsewhere the runner refuses the policy (it
never runs with the network off or on instead).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

from dsh.runners.docker import client as dc
from dsh.runners.linux.net_namespace import PROXY_PORT, listen_in
from dsh.sandbox.net_proxy import ProxyThread, Resolver
from dsh.sandbox.net_rules import NetworkRules

if TYPE_CHECKING:
    import ssl

    from dsh.sandbox.net_secrets import Secrets, SessionCA

_REMOTE = ("docker limits the network to named hosts only with the daemon on this machine ({host}): the host's "
           "proxy listens inside the container's network namespace; nothing ran: run with --runner bwrap, or "
           "turn the network off or on")


def refusal(local: bool) -> str | None:
    """Why an allowlist cannot be held here, or ``None``."""
    if not local:
        return _REMOTE.format(host=dc.docker_host())
    return None


def attach_proxy(api: Any, container_id: str, user: str, rules: NetworkRules, resolver: Resolver | None, *,
                 secrets: Secrets | None = None, ca: SessionCA | None = None,
                 upstream_tls: ssl.SSLContext | None = None) -> ProxyThread:
    """Serve ``rules`` on ``127.0.0.1:3128`` inside the running container (with
    its secrets and CA, as ``NetworkProxy`` takes them).  Raises ``OSError``
    saying why it could not (the caller discards the container)."""
    listener = _entered(api, container_id) if os.geteuid() == 0 else _taken_from_helper(api, container_id, user)
    proxy = ProxyThread(rules, resolver=resolver, sock=listener, secrets=secrets, ca=ca, upstream_tls=upstream_tls)
    try:
        proxy.start()
    except BaseException:
        with contextlib.suppress(OSError):
            listener.close()
        raise
    return proxy


def _entered(api: Any, container_id: str) -> socket.socket:
    """As root: a child enters the container's network namespace and listens there."""
    pid = int(api.inspect_container(container_id)["State"]["Pid"])
    if pid <= 0:
        raise OSError("the container is not running")
    net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # The pid named the container's init when inspected; it still does if
        # the container still runs with it (a pid reused meanwhile would not).
        state = api.inspect_container(container_id)["State"]
        if not state.get("Running") or int(state.get("Pid", 0)) != pid:
            raise OSError("the container stopped while its network namespace was opened")
        return listen_in(os.path.realpath(sys.executable), net_fd)
    finally:
        os.close(net_fd)


# Run in the container, as its user, before any command: standard library only.
_HELPER = (f"import socket, sys, time\n"
           f"s = socket.socket()\n"
           f"s.bind(('127.0.0.1', {PROXY_PORT}))\n"
           f"s.listen(128)\n"
           f"sys.stdout.write('%d\\n' % s.fileno())\n"
           f"sys.stdout.flush()\n"
           f"time.sleep(60)\n")
_HELPER_TIMEOUT_S = 20.0
_SYS_PIDFD_GETFD = 438  # the same number on every architecture


def _taken_from_helper(api: Any, container_id: str, user: str) -> socket.socket:
    """Without root: a helper in the container listens; the host takes its descriptor."""
    ex = api.exec_create(container_id, ["python3", "-I", "-S", "-c", _HELPER], user=user, stdout=True,
                         stderr=True)
    stream = api.exec_start(ex["Id"], socket=True)
    raw = getattr(stream, "_sock", stream)
    try:
        number = _first_line(raw)
        pid = _helper_pid(api, ex["Id"])
        pidfd = os.pidfd_open(pid)
        try:
            # Opened after the pid was read: it names the helper if the helper still runs.
            if not api.exec_inspect(ex["Id"]).get("Running"):
                raise OSError("the helper that makes the proxy's listener ended too soon")
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, number, 0)
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"cannot take the proxy's listener from the container ({os.strerror(err)}; "
                                   "without root it needs the container's user to be yours and "
                                   "kernel.yama.ptrace_scope 0)")
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)
    finally:
        with contextlib.suppress(OSError):
            raw.close()
    listener = socket.socket(fileno=fd)
    if listener.family != socket.AF_INET or listener.getsockname() != ("127.0.0.1", PROXY_PORT) or \
            not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        listener.close()
        raise OSError("the descriptor taken from the container is not the proxy's listener")
    os.set_inheritable(listener.fileno(), False)
    listener.setblocking(False)
    return listener


def _helper_pid(api: Any, exec_id: str) -> int:
    """The helper's host pid.  Under load the daemon may say pid 0 for a
    moment after the helper has started printing: asked again until it
    names one, for as long as the helper itself may take."""
    deadline = time.monotonic() + _HELPER_TIMEOUT_S
    while True:
        state = api.exec_inspect(exec_id)
        pid = int(state.get("Pid") or 0)
        if pid > 0:
            return pid
        if state.get("ExitCode") is not None and not state.get("Running"):
            raise OSError(f"the helper that makes the proxy's listener ended (exit {state.get('ExitCode')})")
        if time.monotonic() > deadline:
            raise OSError("the daemon does not say the pid of the helper that makes the proxy's listener")
        time.sleep(0.02)


def _first_line(raw: Any) -> int:
    """The number the helper prints, read from the exec's multiplexed stream
    (8-byte frame heads: stream, 3 zero bytes, length)."""
    deadline = time.monotonic() + _HELPER_TIMEOUT_S
    frames = bytearray()
    out, err = bytearray(), bytearray()
    while b"\n" not in out:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([raw], [], [], remaining)[0]:
            raise OSError("the helper that makes the proxy's listener did not answer in time")
        chunk = raw.recv(4096)
        if not chunk:
            text = err.decode(errors="replace").strip().splitlines()
            raise OSError("the helper that makes the proxy's listener failed"
                          + (f": {text[-1]}" if text else " (the image needs python3)"))
        frames += chunk
        while len(frames) >= 8 and len(frames) >= 8 + int.from_bytes(frames[4:8], "big"):
            size = int.from_bytes(frames[4:8], "big")
            (out if frames[0] == 1 else err).extend(frames[8:8 + size])
            del frames[:8 + size]
    return int(out.split(b"\n")[0])
