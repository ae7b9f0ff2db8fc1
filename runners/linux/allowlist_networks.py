"""Network by domain allowlist for the runners that start inside a namespace the host made.

The command runs in a network namespace the host made, whose only reachable
service is the host's allowlist proxy (``dsh.runners.linux.net_namespace``):
bwrap (without ``--unshare-net``), or gVisor's sandbox process (with runsc's
``--network=host``, which then serves the sandbox from that namespace), is
started inside it by a small ``python -I -S`` that enters it through fds the
launch passes.  One namespace and one proxy serve every command of the session
with the same allowlist (made on the first, about 25 ms; entering costs what
``--unshare-net`` does), and go when the runner closes.

Landlock's command shares the host's network: its proxy listens on the host's
loopback instead, and the command is limited to that port (``namespaced=False``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from dataclasses import dataclass

from dsh.runners.linux.net_namespace import SandboxNetns, proxy_env
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.net_proxy import ProxyThread, Refusal, Resolver, refused_names
from dsh.sandbox.net_rules import NetworkRules


@dataclass(frozen=True)
class Entry:
    """How a command enters the allowlist's namespace: the argv prefix and its variables."""

    prefix: tuple[str, ...]
    env: dict[str, str]
    python: str  # the interpreter of the prefix
    fds: tuple[int, ...]  # the namespaces' fds the prefix enters: pass them, close them after the run
    port: int  # the proxy's, on 127.0.0.1 where the command is

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class AllowlistNetworks:
    def __init__(self, resolver: Resolver | None = None, *, namespaced: bool = True) -> None:
        """``namespaced``: each proxy listens in a network namespace made for
        it; otherwise on the host's own loopback at a port the kernel picks
        (Landlock, whose command shares the host's network and is limited to
        that port)."""
        self._resolver = resolver
        self._namespaced = namespaced
        self._lock = threading.Lock()
        self._made: dict[NetworkRules, tuple[SandboxNetns | None, ProxyThread, int]] = {}

    def enter(self, rules: NetworkRules, runner: str) -> Entry:
        python = os.path.realpath(sys.executable)
        with self._lock:
            made = self._made.get(rules)
            if made is None:
                made = self._make(rules, runner)
                self._made[rules] = made
            ns, _, port = made
            if ns is None:
                return Entry((), proxy_env(port), python, (), port)
            # Copies the launch owns: closing the session meanwhile cannot hand
            # their numbers to another file the launch would then enter.
            fds = tuple(os.dup(fd) for fd in ns.enter_fds)
        return Entry(tuple(ns.enter_argv(python, fds)), ns.proxy_env(), python, fds, port)

    def _make(self, rules: NetworkRules, runner: str) -> tuple[SandboxNetns | None, ProxyThread, int]:
        ns = None
        try:
            if self._namespaced:
                ns = SandboxNetns.create(os.path.realpath(sys.executable))
                listener = ns.listener
            else:
                listener = socket.create_server(("127.0.0.1", 0))
                listener.setblocking(False)
        except OSError as exc:
            raise SandboxUnavailable(f"{exc}; nothing ran (the network is never opened instead)",
                                     runner=runner) from None
        port = int(listener.getsockname()[1])
        proxy = ProxyThread(rules, resolver=self._resolver, sock=listener)
        try:
            proxy.start()
        except BaseException:
            if ns is not None:
                ns.close()
            listener.close()
            raise
        return ns, proxy, port

    def refused_since(self, rules: NetworkRules, mark: int) -> tuple[str, ...]:
        """The names refused since ``mark``, each once, in order."""
        return refused_names(self.refusals_since(rules, mark))

    def mark(self, rules: NetworkRules) -> int:
        """Where the refusals of ``rules`` stand now (0 before its proxy exists)."""
        with self._lock:
            made = self._made.get(rules)
        return made[1].refused if made is not None else 0

    def refusals_since(self, rules: NetworkRules, mark: int) -> tuple[Refusal, ...]:
        with self._lock:
            made = self._made.get(rules)
        return made[1].refusals_since(mark) if made is not None else ()

    def close(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for ns, proxy, _ in made:
            try:
                proxy.close()
            finally:
                if ns is not None:
                    ns.close()
