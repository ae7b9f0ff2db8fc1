"""``ctx.require(ShellEnvRegistry)``: the registry of managed ``DSH_*`` facts (plugin ``shell-env``).

Managed facts are trusted: the subprocess service drops every inherited
``DSH_*`` variable and the executor rebuilds the namespace from ``collect()``,
so neither a stale environment nor a caller's ``env`` can set or override one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar

from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import UsageError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.own_state import dsh_home

FactValue = str | Callable[[], str | None]
_NAME_RE = LazyPattern(r"DSH_[A-Z0-9_]+")


class ShellEnvHandle:
    """A registration; ``remove()`` (or leaving the ``with`` block) drops it."""

    def __init__(self, registry: ShellEnvRegistry, name: str, token: object) -> None:
        self._registry = registry
        self.name = name
        self._token = token

    def remove(self) -> None:
        self._registry._remove(self.name, self._token)

    def __enter__(self) -> ShellEnvHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class ShellEnvRegistry(Service):
    """Built-in ``DSH_HOME`` plus facts registered by plugins."""

    key: ClassVar[str] = "shell_env"
    auto_mount: ClassVar[bool] = True

    def __init__(self, ctx: Context, config: object = None) -> None:
        super().__init__(ctx, config)
        self._lock = threading.Lock()
        home = dsh_home()
        # No HOME and no password entry (a bare uid): no escalation log to name.
        self._builtin: dict[str, str] = {"DSH_HOME": str(home)} if home is not None else {}
        self._facts: dict[str, tuple[object, FactValue]] = {}

    def register(self, name: str, value: FactValue) -> ShellEnvHandle:
        """Register ``name`` (must start with ``DSH_``); a value or a callable
        evaluated at every ``collect()`` (returning None omits it)."""
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise UsageError(f"shell_env: fact name {name!r} is invalid; use DSH_ followed by A-Z, 0-9 or _")
        if not (isinstance(value, str) or callable(value)):
            raise UsageError(f"shell_env: fact {name} must be a string or a callable returning one")
        token = object()
        with self._lock:
            if name in self._builtin or name in self._facts:
                raise UsageError(f"shell_env: fact {name} is already registered; remove it first")
            self._facts[name] = (token, value)
        return ShellEnvHandle(self, name, token)

    def _remove(self, name: str, token: object) -> None:
        with self._lock:
            current = self._facts.get(name)
            if current is not None and current[0] is token:
                del self._facts[name]

    def collect(self) -> dict[str, str]:
        """The trusted snapshot for one execution."""
        with self._lock:
            facts = dict(self._facts)
            out = dict(self._builtin)
        for name, (_, value) in sorted(facts.items()):
            resolved = value() if callable(value) else value
            if resolved is None:
                continue
            if not isinstance(resolved, str):
                raise UsageError(f"shell_env: fact {name} produced {type(resolved).__name__}, not a string")
            out[name] = resolved
        return out
