"""Network by domain allowlist for docker: the host's proxy listens inside the container.

The container keeps ``network_mode=none`` (its own namespace, only ``lo``).
Once it runs, a short-lived child enters that namespace through the container
init's ``/proc/<pid>/ns/net`` and listens on ``127.0.0.1:3128`` there
(``dsh.runners.linux.net_namespace.listen_in``); the host's allowlist proxy
serves that listener.  Every connection the command makes to the proxy is
accepted on the host, and every connection upstream leaves from the host's
own namespace: the command can reach nothing else.

Nothing runs in the container for this (no bridge the command could kill or
replace), and the command cannot take the proxy's port, which is bound before
any command runs.  Entering a namespace the daemon made needs root on the
host, and the daemon on this machine: otherwise the runner refuses the policy
(it never runs with the network off or on instead).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from dsh.runners.docker import client as dc
from dsh.runners.linux.net_namespace import listen_in
from dsh.sandbox.net_proxy import ProxyThread, Resolver
from dsh.sandbox.net_rules import NetworkRules

_NOT_ROOT = ("docker limits the network to named hosts only when dsh-sandbox runs as root: the host's proxy "
             "listens inside the container's network namespace, which belongs to the daemon; nothing ran: run "
             "with --runner bwrap, or as root, or turn the network off or on")
_REMOTE = ("docker limits the network to named hosts only with the daemon on this machine ({host}): the host's "
           "proxy listens inside the container's network namespace; nothing ran: run with --runner bwrap, or "
           "turn the network off or on")


def refusal(local: bool) -> str | None:
    """Why an allowlist cannot be held here, or ``None``."""
    if not local:
        return _REMOTE.format(host=dc.docker_host())
    if os.geteuid() != 0:
        return _NOT_ROOT
    return None


def attach_proxy(api: Any, container_id: str, rules: NetworkRules, resolver: Resolver | None) -> ProxyThread:
    """Serve ``rules`` on ``127.0.0.1:3128`` inside the running container.
    Raises ``OSError`` saying why it could not (the caller discards the container)."""
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
        listener = listen_in(os.path.realpath(sys.executable), net_fd)
    finally:
        os.close(net_fd)
    proxy = ProxyThread(rules, resolver=resolver, sock=listener)
    try:
        proxy.start()
    except BaseException:
        with contextlib.suppress(OSError):
            listener.close()
        raise
    return proxy
