"""The terminal seam (``ctx.require(TerminalRegistry)``): vocabulary, errors and the backend interface.

A terminal session is a persistent pseudo-terminal that outlives one call.
The registry (``terminal_registry``) owns ids, owners, publication and
waiting for teardown; a backend owns the terminal mechanics: it spawns the
session inside the same sandbox as one-shot commands, types into it and
settles its screen.

Flow: ``TerminalOpenRequest`` -> ``registry.open(owner, request)`` -> a
published ``TerminalSession`` (id, owner, backend session) -> ``send`` a
``TerminalSendRequest`` and get a ``TerminalSnapshot`` (the viewport plus a
``wait_reason``) -> ``close`` waits until the captured process tree is gone.
"""

from __future__ import annotations

import abc
import signal
from dataclasses import dataclass
from typing import ClassVar, Literal

from dsh.sandbox.errors import DshError
from dsh.sandbox.modes import SandboxMode

#: Why a settle returned: the foreground program waits on the terminal
#: (``stdin_read``), the output went quiet (``inferred_idle``), the wait ran
#: out (``timeout``) or the session ended (``session_exit``).
WaitReason = Literal["stdin_read", "inferred_idle", "timeout", "session_exit"]
Dialect = Literal["bash", "pwsh"]

#: The signals a model may send to a session's foreground program, by name.
ALLOWED_SIGNALS: dict[str, int] = {
    "SIGINT": int(signal.SIGINT),
    "SIGTERM": int(signal.SIGTERM),
    "SIGKILL": int(signal.SIGKILL),
    "SIGTSTP": int(signal.SIGTSTP),
    "SIGHUP": int(signal.SIGHUP),
}

DEFAULT_ROWS = 24
DEFAULT_COLS = 80
MAX_ROWS = 200
MAX_COLS = 400
#: Lines kept above the viewport, whatever the program prints.
DEFAULT_SCROLLBACK = 1000
DEFAULT_SETTLE_MS = 10_000
MAX_SETTLE_MS = 600_000
#: Quiet output for this long, with no sign of a read, is ``inferred_idle``.
DEFAULT_IDLE_MS = 1_500


class TerminalErrorCode:
    DUPLICATE_BACKEND = "DUPLICATE_BACKEND"
    DUPLICATE_NAME = "DUPLICATE_NAME"
    FOREIGN_SESSION = "FOREIGN_SESSION"
    NO_BACKEND = "NO_BACKEND"
    NO_SESSION = "NO_SESSION"
    OWNER_NOT_LIVE = "OWNER_NOT_LIVE"
    SEND_ACTIVE = "SEND_ACTIVE"
    SERVICE_DISPOSING = "SERVICE_DISPOSING"


class TerminalError(DshError):
    """A terminal request that cannot be served; ``code`` is stable, the message says what to do."""

    code = "TERMINAL_ERROR"


class DuplicateBackendError(TerminalError):
    code = TerminalErrorCode.DUPLICATE_BACKEND


class DuplicateNameError(TerminalError):
    code = TerminalErrorCode.DUPLICATE_NAME


class ForeignSessionError(TerminalError):
    code = TerminalErrorCode.FOREIGN_SESSION


class NoBackendError(TerminalError):
    code = TerminalErrorCode.NO_BACKEND


class NoSessionError(TerminalError):
    code = TerminalErrorCode.NO_SESSION


class OwnerNotLiveError(TerminalError):
    code = TerminalErrorCode.OWNER_NOT_LIVE


class TerminalLimitError(TerminalError):
    code = "TERMINAL_LIMIT"


class SendActiveError(TerminalError):
    code = TerminalErrorCode.SEND_ACTIVE


class ServiceDisposingError(TerminalError):
    code = TerminalErrorCode.SERVICE_DISPOSING


@dataclass(frozen=True)
class TerminalOpenRequest:
    """What to open.  ``backend`` None: the registry's default backend."""

    backend: str | None = None
    name: str | None = None  # unique per owner, for the model to tell sessions apart
    rows: int = DEFAULT_ROWS
    cols: int = DEFAULT_COLS
    workdir: str | None = None
    dialect: Dialect = "bash"
    #: Only through an approved escalation, like one-shot commands.
    sandbox_mode: SandboxMode | None = None

    def __post_init__(self) -> None:
        for name, cap in (("rows", MAX_ROWS), ("cols", MAX_COLS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= cap:
                raise ValueError(f"{name} must be a whole number from 1 to {cap}, got {value!r}")


@dataclass(frozen=True)
class TerminalSendRequest:
    """One line-oriented send: ``text`` typed, then Enter if ``submit``;
    ``signal`` (one of ``ALLOWED_SIGNALS``) goes to the foreground program first."""

    text: str = ""
    submit: bool = True
    signal: str | None = None

    def __post_init__(self) -> None:
        if self.signal is not None and self.signal not in ALLOWED_SIGNALS:
            allowed = ", ".join(ALLOWED_SIGNALS)
            raise ValueError(f"signal: {self.signal!r} is not allowed; use one of {allowed}")


@dataclass(frozen=True)
class TerminalSnapshot:
    """What one settle saw."""

    viewport: tuple[str, ...]  # the screen's rows, trailing blanks stripped
    cursor: tuple[int, int]  # (row, col), 0-based
    wait_reason: WaitReason
    exit_code: int | None = None  # set once the session ended
    signal: str | None = None
    scrollback_lines: int = 0  # lines above the viewport still held
    output_lost: bool = False  # the program printed faster than the screen was fed

    @property
    def text(self) -> str:
        rows = list(self.viewport)
        while rows and not rows[-1]:
            rows.pop()
        return "\n".join(rows)


class TerminalBackendSession(abc.ABC):
    """One live terminal, driven by the registry (which serialises sends)."""

    #: The screen once the program was ready for input (or gave up waiting), at open.
    initial: TerminalSnapshot | None = None

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    @property
    def shell_foreground(self) -> bool:
        """The started program itself (the shell) is in the foreground (no child runs there)."""
        return True

    @abc.abstractmethod
    def send(self, request: TerminalSendRequest, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        """Type ``request`` and settle (at most ``settle_ms``)."""

    @abc.abstractmethod
    def read(self, *, settle_ms: int, idle_ms: int) -> TerminalSnapshot:
        """Settle without typing (``settle_ms`` 0: the screen as it is now)."""

    @abc.abstractmethod
    def signal(self, name: str) -> None:
        """Send ``name`` (one of ``ALLOWED_SIGNALS``) to the foreground process group."""

    @abc.abstractmethod
    def scrollback(self, max_lines: int) -> tuple[str, ...]:
        """Up to ``max_lines`` lines above the viewport, oldest first."""

    @abc.abstractmethod
    def close(self, wait_s: float) -> bool:
        """Hang up and kill everything the session started; True once it is all gone."""


class TerminalBackend(abc.ABC):
    """A kind of terminal (``terminal-bash``); registers itself with the registry."""

    name: ClassVar[str]

    @abc.abstractmethod
    def open(self, request: TerminalOpenRequest) -> TerminalBackendSession:
        """Start a session; raises ``SandboxUnavailable`` (nothing ran) when it cannot be sandboxed."""
