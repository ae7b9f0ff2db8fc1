"""``ctx.require(TerminalRegistry)``: owner-scoped persistent terminal sessions (plugin ``terminals``).

The registry owns what is not terminal mechanics: the backends by name (one
each), session ids, each session's owner (every call names its owner and a
session answers only to it), names unique per owner, one send at a time per
session, owners that went away, and teardown that waits until every process
a session started is gone.  Backends (``terminal-bash``) register themselves
when they are mounted.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import ClassVar

from dsh.executors.terminal_seam import (
    DuplicateBackendError,
    DuplicateNameError,
    ForeignSessionError,
    NoBackendError,
    NoSessionError,
    OwnerNotLiveError,
    SendActiveError,
    ServiceDisposingError,
    TerminalBackend,
    TerminalBackendSession,
    TerminalLimitError,
    TerminalOpenRequest,
    TerminalSendRequest,
    TerminalSnapshot,
)
from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import ConfigError


@dataclass(frozen=True)
class TerminalRegistryConfig:
    #: Most sessions one owner may hold at once.
    max_sessions_per_owner: int = 8
    #: Seconds ``close`` waits for one session's processes to be gone.
    close_wait_s: float = 30.0


class TerminalSession:
    """One published session.  ``busy`` is guarded by the registry's lock."""

    def __init__(self, session_id: str, owner: str, name: str | None, backend: str,
                 request: TerminalOpenRequest, session: TerminalBackendSession) -> None:
        self.id = session_id
        self.owner = owner
        self.name = name
        self.backend = backend
        self.request = request
        self.session = session
        self.started_at = time.time()
        self.busy = False


class TerminalRegistry(Service):
    """Provider of ``ctx.terminals``."""

    key: ClassVar[str] = "terminals"
    Config: ClassVar[type[TerminalRegistryConfig]] = TerminalRegistryConfig
    config: TerminalRegistryConfig

    def __init__(self, ctx: Context, config: TerminalRegistryConfig | None = None) -> None:
        super().__init__(ctx, config)
        if self.config.max_sessions_per_owner < 1:
            raise ConfigError("terminals: max_sessions_per_owner must be at least 1, got "
                              f"{self.config.max_sessions_per_owner}")
        self._backends: dict[str, TerminalBackend] = {}
        self._sessions: dict[str, TerminalSession] = {}
        self._retired: set[str] = set()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._disposing = False

    # -- backends ---------------------------------------------------------------------
    def register_backend(self, backend: TerminalBackend) -> None:
        with self._lock:
            self._check_live()
            if backend.name in self._backends:
                raise DuplicateBackendError(
                    f"a terminal backend named {backend.name!r} is already registered; mount one provider per name")
            self._backends[backend.name] = backend

    def unregister_backend(self, backend: TerminalBackend) -> None:
        with self._lock:
            if self._backends.get(backend.name) is backend:
                del self._backends[backend.name]

    def backends(self) -> list[str]:
        with self._lock:
            return sorted(self._backends)

    # -- sessions ---------------------------------------------------------------------
    def open(self, owner: str, request: TerminalOpenRequest) -> TerminalSession:
        with self._lock:
            self._check_live()
            self._check_owner(owner)
            backend = self._backend(request.backend)
            mine = [s for s in self._sessions.values() if s.owner == owner]
            if request.name is not None and any(s.name == request.name for s in mine):
                raise DuplicateNameError(
                    f"you already have a terminal named {request.name!r}; pick another name or "
                    "use that session's id")
            if len(mine) >= self.config.max_sessions_per_owner:
                raise TerminalLimitError(
                    f"too many terminals: you hold {len(mine)}; close one with terminal_close first")
        session = backend.open(request)  # outside the lock: it spawns
        with self._lock:
            if self._disposing or owner in self._retired:
                late = True
            else:
                late = False
                entry = TerminalSession(f"term-{next(self._ids)}", owner, request.name, backend.name,
                                        request, session)
                self._sessions[entry.id] = entry
        if late:
            session.close(self.config.close_wait_s)
            self._check_live()
            raise OwnerNotLiveError(f"owner {owner!r} went away while its terminal was opening; it was closed")
        return entry

    def get(self, session_id: str, owner: str) -> TerminalSession:
        with self._lock:
            self._check_live()
            entry = self._sessions.get(session_id)
        if entry is None:
            raise NoSessionError(
                f"no terminal {session_id!r}: it never existed or was closed; list yours with terminal_list")
        if entry.owner != owner:
            raise ForeignSessionError(
                f"terminal {session_id!r} belongs to another agent; you can only use your own terminals")
        return entry

    def list(self, owner: str) -> list[TerminalSession]:
        with self._lock:
            return [s for s in self._sessions.values() if s.owner == owner]

    def send(self, session_id: str, owner: str, request: TerminalSendRequest, *,
             settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        entry = self._claim(session_id, owner)
        try:
            return entry.session.send(request, settle_ms=settle_ms, idle_ms=idle_ms)
        finally:
            self._release(entry)

    def read(self, session_id: str, owner: str, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        entry = self._claim(session_id, owner)
        try:
            return entry.session.read(settle_ms=settle_ms, idle_ms=idle_ms)
        finally:
            self._release(entry)

    def signal(self, session_id: str, owner: str, name: str) -> None:
        # Not serialised with sends: interrupting a send that waits is the point.
        self.get(session_id, owner).session.signal(name)

    def close_session(self, session_id: str, owner: str) -> bool:
        """Close one session; True once every process it started is gone."""
        entry = self.get(session_id, owner)
        with self._lock:
            self._sessions.pop(entry.id, None)
        return entry.session.close(self.config.close_wait_s)

    def retire_owner(self, owner: str) -> int:
        """The owner went away: close its sessions and refuse it new ones.  How many closed."""
        with self._lock:
            self._retired.add(owner)
            entries = [s for s in self._sessions.values() if s.owner == owner]
            for entry in entries:
                del self._sessions[entry.id]
        for entry in entries:
            entry.session.close(self.config.close_wait_s)
        return len(entries)

    # -- internals ------------------------------------------------------------------
    def _claim(self, session_id: str, owner: str) -> TerminalSession:
        entry = self.get(session_id, owner)
        with self._lock:
            if entry.busy:
                raise SendActiveError(
                    f"terminal {session_id!r} is still handling another send; wait for it (or "
                    "interrupt it with terminal_signal) before sending again")
            entry.busy = True
        return entry

    def _release(self, entry: TerminalSession) -> None:
        with self._lock:
            entry.busy = False

    def _backend(self, name: str | None) -> TerminalBackend:
        if name is None:
            if len(self._backends) == 1:
                return next(iter(self._backends.values()))
            if "terminal-bash" in self._backends:
                return self._backends["terminal-bash"]
        elif name in self._backends:
            return self._backends[name]
        known = ", ".join(sorted(self._backends)) or "none mounted"
        raise NoBackendError(f"no terminal backend {name!r}; the backends here are: {known}")

    def _check_live(self) -> None:
        if self._disposing:
            raise ServiceDisposingError("the terminal service is shutting down; no new terminal calls")

    def _check_owner(self, owner: str) -> None:
        if owner in self._retired:
            raise OwnerNotLiveError(f"owner {owner!r} is no longer live; its terminals were closed")

    def close(self) -> None:
        """Teardown: refuse new calls, close every session and wait for each."""
        with self._lock:
            if self._disposing:
                return
            self._disposing = True
            entries = list(self._sessions.values())
            self._sessions.clear()
        for entry in entries:
            entry.session.close(self.config.close_wait_s)
