"""The registry's rules, with a stand-in backend: ids, owners, names, one send at a time, teardown."""

from __future__ import annotations

import threading
from typing import ClassVar

import pytest
from dsh.executors.terminal_registry import TerminalRegistry
from dsh.executors.terminal_seam import (
    TerminalBackend,
    TerminalBackendSession,
    TerminalError,
    TerminalOpenRequest,
    TerminalSendRequest,
    TerminalSnapshot,
)
from dsh.sandbox.context import Context


class _Session(TerminalBackendSession):
    def __init__(self) -> None:
        self.closed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    @property
    def alive(self) -> bool:
        return not self.closed

    def send(self, request: TerminalSendRequest, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        self.entered.set()
        self.release.wait(30)
        return TerminalSnapshot((request.text,), (0, 0), "stdin_read")

    def read(self, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        return TerminalSnapshot((), (0, 0), "inferred_idle")

    def signal(self, name: str) -> None:
        pass

    def scrollback(self, max_lines: int) -> tuple[str, ...]:
        return ()

    def close(self, wait_s: float) -> bool:
        self.closed = True
        return True


class _Backend(TerminalBackend):
    name: ClassVar[str] = "fake"

    def __init__(self) -> None:
        self.sessions: list[_Session] = []

    def open(self, request: TerminalOpenRequest) -> _Session:
        self.sessions.append(_Session())
        return self.sessions[-1]


def _registry() -> tuple[TerminalRegistry, _Backend]:
    registry = TerminalRegistry(Context())
    backend = _Backend()
    registry.register_backend(backend)
    return registry, backend


def _code(exc: pytest.ExceptionInfo[TerminalError]) -> str:
    return exc.value.code


def test_duplicate_backend_and_unknown_backend() -> None:
    registry, _ = _registry()
    with pytest.raises(TerminalError) as exc:
        registry.register_backend(_Backend())
    assert _code(exc) == "DUPLICATE_BACKEND"
    with pytest.raises(TerminalError) as exc:
        registry.open("a", TerminalOpenRequest(backend="nope"))
    assert _code(exc) == "NO_BACKEND" and "fake" in str(exc.value)


def test_sessions_answer_only_to_their_owner() -> None:
    registry, _ = _registry()
    mine = registry.open("a", TerminalOpenRequest(name="build"))
    with pytest.raises(TerminalError) as exc:
        registry.get(mine.id, "b")
    assert _code(exc) == "FOREIGN_SESSION"
    with pytest.raises(TerminalError) as exc:
        registry.close_session(mine.id, "b")
    assert _code(exc) == "FOREIGN_SESSION"
    assert [s.id for s in registry.list("a")] == [mine.id] and registry.list("b") == []
    with pytest.raises(TerminalError) as exc:
        registry.get("term-999", "a")
    assert _code(exc) == "NO_SESSION"


def test_names_are_unique_per_owner() -> None:
    registry, _ = _registry()
    registry.open("a", TerminalOpenRequest(name="build"))
    registry.open("b", TerminalOpenRequest(name="build"))  # another owner's namespace
    with pytest.raises(TerminalError) as exc:
        registry.open("a", TerminalOpenRequest(name="build"))
    assert _code(exc) == "DUPLICATE_NAME"


def test_one_send_at_a_time() -> None:
    registry, backend = _registry()
    entry = registry.open("a", TerminalOpenRequest())
    t = threading.Thread(target=registry.send, args=(entry.id, "a", TerminalSendRequest("x")),
                         kwargs={"settle_ms": 1, "idle_ms": 1})
    t.start()
    assert backend.sessions[0].entered.wait(30)
    with pytest.raises(TerminalError) as exc:
        registry.send(entry.id, "a", TerminalSendRequest("y"), settle_ms=1, idle_ms=1)
    assert _code(exc) == "SEND_ACTIVE"
    backend.sessions[0].release.set()
    t.join(30)
    assert registry.send(entry.id, "a", TerminalSendRequest("z"), settle_ms=1, idle_ms=1).viewport == ("z",)


def test_a_retired_owner_loses_its_sessions_and_opens_none() -> None:
    registry, backend = _registry()
    entry = registry.open("a", TerminalOpenRequest())
    assert registry.retire_owner("a") == 1
    assert backend.sessions[0].closed
    with pytest.raises(TerminalError) as exc:
        registry.open("a", TerminalOpenRequest())
    assert _code(exc) == "OWNER_NOT_LIVE"
    with pytest.raises(TerminalError) as exc:
        registry.get(entry.id, "a")
    assert _code(exc) == "NO_SESSION"


def test_teardown_closes_everything_and_refuses_calls() -> None:
    registry, backend = _registry()
    entry = registry.open("a", TerminalOpenRequest())
    registry.close()
    assert backend.sessions[0].closed
    for call in (lambda: registry.open("a", TerminalOpenRequest()), lambda: registry.get(entry.id, "a")):
        with pytest.raises(TerminalError) as exc:
            call()
        assert _code(exc) == "SERVICE_DISPOSING"


def test_bad_sends_and_sizes_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="SIGSTOP"):
        TerminalSendRequest("x", signal="SIGSTOP")
    with pytest.raises(ValueError, match="rows"):
        TerminalOpenRequest(rows=0)
