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
import secrets as secrets_module
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dsh.runners.linux.net_namespace import SandboxNetns, proxy_env
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.net_proxy import ProxyThread, Refusal, Resolver, refused_names
from dsh.sandbox.net_rules import NetworkRules

if TYPE_CHECKING:
    import ssl

    from dsh.sandbox.net_secrets import Secrets, SessionCA


@dataclass(frozen=True)
class Entry:
    """How a command enters the allowlist's namespace: the argv prefix and its variables."""

    prefix: tuple[str, ...]
    env: dict[str, str]
    python: str  # the interpreter of the prefix
    fds: tuple[int, ...]  # the namespaces' fds the prefix enters: pass them, close them after the run
    port: int  # the proxy's, on 127.0.0.1 where the command is
    #: With secrets: each variable holding its placeholder (never the value), and
    #: the CA bundle the command must trust (the runner puts it in, read-only).
    secret_env: Mapping[str, str] = field(default_factory=dict)
    ca_bundle: bytes | None = None
    secrets: Secrets | None = None

    def refuse_values_in(self, env: Mapping[str, str], runner: str) -> None:
        """Refuse a command environment that holds a secret's value under any
        name (a variable passed through with a copy of it)."""
        found = self.secrets.found_in(env) if self.secrets is not None else None
        if found is not None:
            raise SandboxUnavailable(f"the variable {found[0]} holds the value of the secret {found[1]}, which "
                                     "never enters the sandbox; nothing ran: stop passing it through", runner=runner)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass(frozen=True)
class _Made:
    ns: SandboxNetns | None
    proxy: ProxyThread
    port: int
    secret_env: Mapping[str, str]
    ca_bundle: bytes | None
    secrets: Secrets | None
    credential: str | None = None


class AllowlistNetworks:
    def __init__(self, resolver: Resolver | None = None, *, namespaced: bool = True,
                 upstream_tls: ssl.SSLContext | None = None) -> None:
        """``namespaced``: each proxy listens in a network namespace made for
        it; otherwise on the host's own loopback at a port the kernel picks
        (Landlock, whose command shares the host's network and is limited to
        that port).  ``upstream_tls``: how a proxy with secrets checks their
        hosts' certificates (the system's trust unless given; tests trust a
        local server's CA)."""
        self._resolver = resolver
        self._namespaced = namespaced
        self._upstream_tls = upstream_tls
        self._lock = threading.Lock()
        self._made: dict[NetworkRules, _Made] = {}

    def enter(self, rules: NetworkRules, runner: str) -> Entry:
        python = os.path.realpath(sys.executable)
        with self._lock:
            made = self._made.get(rules)
            if made is None:
                made = self._make(rules, runner)
                self._made[rules] = made
            ns, port = made.ns, made.port
            if ns is None:
                return Entry((), proxy_env(port, made.credential), python, (), port, made.secret_env,
                             made.ca_bundle, made.secrets)
            # Copies the launch owns: closing the session meanwhile cannot hand
            # their numbers to another file the launch would then enter.
            fds = tuple(os.dup(fd) for fd in ns.enter_fds)
        return Entry(tuple(ns.enter_argv(python, fds)), ns.proxy_env(), python, fds, port, made.secret_env,
                     made.ca_bundle, made.secrets)

    def _make(self, rules: NetworkRules, runner: str) -> _Made:
        secrets, ca = self._secrets(rules, runner)
        ns, credential = None, None
        try:
            if self._namespaced:
                ns = SandboxNetns.create(os.path.realpath(sys.executable))
                listener = ns.listener
            else:
                listener = socket.create_server(("127.0.0.1", 0))
                listener.setblocking(False)
                # Every process on the host reaches this port, other users'
                # too: only a client with the session's password is served
                # (the command gets it in its proxy variables, which no
                # other user can read).
                credential = secrets_module.token_urlsafe(24)
        except OSError as exc:
            raise SandboxUnavailable(f"{exc}; nothing ran (the network is never opened instead)",
                                     runner=runner) from None
        port = int(listener.getsockname()[1])
        proxy = ProxyThread(rules, resolver=self._resolver, sock=listener, secrets=secrets, ca=ca,
                            upstream_tls=self._upstream_tls, credential=credential)
        try:
            proxy.start()
        except BaseException:
            if ns is not None:
                ns.close()
            listener.close()
            raise
        if secrets is None or ca is None:
            return _Made(ns, proxy, port, {}, None, None, credential)
        return _Made(ns, proxy, port, secrets.environment(), ca.bundle(), secrets, credential)

    @staticmethod
    def _secrets(rules: NetworkRules, runner: str) -> tuple[Secrets | None, SessionCA | None]:
        """The session's values (from this process's environment) and its CA,
        when ``rules`` has secrets.  The values stay in the proxy; the command
        gets the placeholders."""
        if not rules.secrets:
            return None, None
        from dsh.sandbox.net_secrets import Secrets, SessionCA

        try:
            return Secrets(rules.secrets, os.environ), SessionCA()
        except ConfigError as exc:
            raise SandboxUnavailable(f"{exc}; nothing ran", runner=runner) from None
        except ImportError as exc:
            raise SandboxUnavailable(f"secrets need the cryptography package ({exc}); install "
                                     "dsh-sandbox[secrets]; nothing ran", runner=runner) from None

    def refused_since(self, rules: NetworkRules, mark: int) -> tuple[str, ...]:
        """The names refused since ``mark``, each once, in order."""
        return refused_names(self.refusals_since(rules, mark))

    def mark(self, rules: NetworkRules) -> int:
        """Where the refusals of ``rules`` stand now (0 before its proxy exists)."""
        with self._lock:
            made = self._made.get(rules)
        return made.proxy.refused if made is not None else 0

    def refusals_since(self, rules: NetworkRules, mark: int) -> tuple[Refusal, ...]:
        with self._lock:
            made = self._made.get(rules)
        return made.proxy.refusals_since(mark) if made is not None else ()

    def close(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for one in made:
            try:
                one.proxy.close()
            finally:
                if one.ns is not None:
                    one.ns.close()
