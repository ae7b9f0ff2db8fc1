"""A runner's allowlist namespaces and proxies, made on first use (bwrap, gVisor, Landlock).

Light to import: the proxy and its event loop load only when a policy with an
allowlist first runs.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dsh.sandbox.policy import SandboxPolicy

if TYPE_CHECKING:
    import ssl

    from dsh.runners.linux.allowlist_networks import AllowlistNetworks, Entry
    from dsh.sandbox.net_proxy import Resolver


class AllowlistSession:
    def __init__(self, resolver: Resolver | None, *, namespaced: bool = True,
                 upstream_tls: ssl.SSLContext | None = None) -> None:
        """``resolver``: how the proxy resolves names (the system's unless
        given; tests map names to loopback servers); ``namespaced`` and
        ``upstream_tls``: as ``AllowlistNetworks`` takes them."""
        self._resolver = resolver
        self._namespaced = namespaced
        self._upstream_tls = upstream_tls
        self._lock = threading.Lock()
        self._networks: AllowlistNetworks | None = None

    def enter(self, policy: SandboxPolicy, runner: str) -> Entry:
        """How a command of ``policy`` (which has an allowlist) enters its namespace."""
        from dsh.runners.linux.allowlist_networks import AllowlistNetworks

        assert policy.network_allowlist is not None
        with self._lock:
            if self._networks is None:
                self._networks = AllowlistNetworks(self._resolver, namespaced=self._namespaced,
                                                   upstream_tls=self._upstream_tls)
            networks = self._networks
        return networks.enter(policy.network_allowlist, runner)

    def mark(self, policy: SandboxPolicy) -> int:
        """``Runner.network_mark``."""
        with self._lock:
            networks = self._networks
        if policy.network_allowlist is None or networks is None:
            return 0  # its proxy starts counting from 0 when it is made
        return networks.mark(policy.network_allowlist)

    def refused(self, policy: SandboxPolicy, mark: int) -> tuple[str, ...]:
        """``Runner.network_refused``."""
        with self._lock:
            networks = self._networks
        if policy.network_allowlist is None or networks is None:
            return ()
        return networks.refused_since(policy.network_allowlist, mark)

    def close(self) -> None:
        with self._lock:
            networks, self._networks = self._networks, None
        if networks is not None:
            networks.close()
