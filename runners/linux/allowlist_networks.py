"""Network by domain allowlist for the runners that start inside a namespace the host made.

The command runs in a network namespace the host made, whose only reachable
service is the host's allowlist proxy (``dsh.runners.linux.net_namespace``):
bwrap (without ``--unshare-net``), or gVisor's sandbox process (with runsc's
``--network=host``, which then serves the sandbox from that namespace), is
started inside it by a small ``python -I -S`` that enters it through fds the
launch passes.  One namespace and one proxy serve every command of the session
with the same allowlist (made on the first, about 25 ms; entering costs what
``--unshare-net`` does), and go when the runner closes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass

from dsh.runners.linux.net_namespace import SandboxNetns
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

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class AllowlistNetworks:
    def __init__(self, resolver: Resolver | None = None) -> None:
        self._resolver = resolver
        self._lock = threading.Lock()
        self._made: dict[NetworkRules, tuple[SandboxNetns, ProxyThread]] = {}

    def enter(self, rules: NetworkRules, runner: str) -> Entry:
        python = os.path.realpath(sys.executable)
        with self._lock:
            made = self._made.get(rules)
            if made is None:
                made = self._make(rules, runner)
                self._made[rules] = made
            # Copies the launch owns: closing the session meanwhile cannot hand
            # their numbers to another file the launch would then enter.
            fds = tuple(os.dup(fd) for fd in made[0].enter_fds)
        ns = made[0]
        return Entry(tuple(ns.enter_argv(python, fds)), ns.proxy_env(), python, fds)

    def _make(self, rules: NetworkRules, runner: str) -> tuple[SandboxNetns, ProxyThread]:
        try:
            ns = SandboxNetns.create(os.path.realpath(sys.executable))
        except OSError as exc:
            raise SandboxUnavailable(f"{exc}; nothing ran (the network is never opened instead)",
                                     runner=runner) from None
        proxy = ProxyThread(rules, resolver=self._resolver, sock=ns.listener)
        try:
            proxy.start()
        except BaseException:
            ns.close()
            raise
        return ns, proxy

    def refused_since(self, rules: NetworkRules, mark: int) -> tuple[str, ...]:
        """The names refused since ``mark``, each once, in order."""
        return refused_names(self.refusals_since(rules, mark))

    def refusals(self, rules: NetworkRules) -> tuple[Refusal, ...]:
        """What the proxy of ``rules`` refused so far (the latest, oldest first)."""
        with self._lock:
            made = self._made.get(rules)
        return made[1].refusals if made is not None else ()

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
        for ns, proxy in made:
            try:
                proxy.close()
            finally:
                ns.close()
