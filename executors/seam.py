"""The shell seam (``ctx.require(ShellExecutor)``): vocabulary, the ``ShellExecutor`` definition,
the execution handle and the shared exit-status markers.

Flow: ``ShellExecRequest`` -> ``executor.resolve()`` -> ``ShellExecSpec`` ->
``executor.execute()`` -> ``ShellExecution`` (projections: ``result()``,
``read_output()``, ``observed``, ``kill()``, ``done``).  ``resolve`` is the only
place defaults and caps apply; ``execute`` never re-defaults.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from dsh.sandbox.context import Service
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.stdin_feed import StdinFeed

OnExpiry = Literal["kill", "none"]
ProcessStatus = Literal["running", "completed", "killed"]
StreamName = Literal["stdout", "stderr"]

# Defaults and caps; executors take them from their Config.
DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
MAX_OUTPUT_BYTES = 64_000
MAX_SPILL_BYTES = 64 * 1024 * 1024
GRACE_MS = 3_000
ENV_OVERRIDES: Mapping[str, str] = {
    "NO_COLOR": "1",
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
}


class AbortSignal:
    """A caller-owned abort flag, set once to stop an execution.  Thread-safe."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: str = "aborted") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks = list(self._callbacks)
        for cb in callbacks:
            cb()

    def add_callback(self, cb: Callable[[], None]) -> None:
        """Call ``cb`` on abort (immediately if already aborted)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        cb()

    def remove_callback(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if cb in self._callbacks:
                self._callbacks.remove(cb)

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


@dataclass(frozen=True)
class TerminalSize:
    """Run on a pseudo-terminal of this size, allocated inside the sandbox."""

    rows: int = 24
    cols: int = 80

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                raise ValueError(f"terminal {name} must be a whole number from 1 to 1000, got {value!r}")


@dataclass(frozen=True)
class ShellExecRequest:
    """What a caller asks for.  Only ``command`` is required.

    ``stdin``, ``env`` and ``stdout_max_bytes`` are for trusted in-process
    callers; the model-facing tools never expose them.  ``stdin`` is bytes
    written once, or a ``StdinFeed`` streamed in bounded memory.  ``terminal``
    runs the command on a pty inside the sandbox (the terminal relay is the
    sandbox's first process; stdin then carries its frames).
    """

    command: str
    workdir: str | None = None
    timeout_ms: int | None = None
    on_expiry: OnExpiry | None = None
    stdout_max_bytes: int | None = None
    signal: AbortSignal | None = None
    stdin: bytes | StdinFeed | None = None
    env: Mapping[str, str] | None = None
    dsh_env: Mapping[str, str] | None = None
    sandbox_mode: SandboxMode | None = None  # only through escalation
    #: Trusted callers (the CLI's ``run -- ARGV``) may run an exact argv instead
    #: of ``command`` through the shell; it is never joined into a string.
    argv: tuple[str | bytes, ...] | None = None
    terminal: TerminalSize | None = None
    #: stdout and stderr as one stream, in the order written (in ``stdout``):
    #: what the model-facing tools show.  False keeps them apart.
    merge_output: bool = False


@dataclass(frozen=True)
class ShellExecSpec:
    """A fully resolved request: every field explicit, caps applied."""

    command: str
    workdir: str
    timeout_ms: int
    on_expiry: OnExpiry
    max_output_bytes: int
    stdout_max_bytes: int
    max_spill_bytes: int
    grace_ms: int
    signal: AbortSignal | None = None
    stdin: bytes | StdinFeed | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    dsh_env: Mapping[str, str] = field(default_factory=dict)
    sandbox_policy: SandboxPolicy | None = None
    requested_timeout_ms: int | None = None  # what the caller asked, before the cap
    timeout_capped: bool = False
    argv: tuple[str | bytes, ...] | None = None  # exact argv instead of the shell
    terminal: TerminalSize | None = None
    merge_output: bool = False


@dataclass(frozen=True)
class CollectedOutput:
    """One stream's collected output: retained text plus recovery information.

    ``text`` keeps the tail by default; ``omitted_bytes``/``omitted_lines`` are
    exact.  ``spill_path`` names a private (0600) file with the full stream up
    to the spill cap; ``spill_truncated`` says the cap was hit too.
    """

    text: str
    total_bytes: int = 0
    omitted_bytes: int = 0
    omitted_lines: int = 0
    spill_path: str | None = None
    spill_truncated: bool = False

    @property
    def truncated(self) -> bool:
        return self.omitted_bytes > 0


@dataclass(frozen=True)
class SandboxFacts:
    """Sandbox facts of one run, reported independently of the exit status."""

    mode: SandboxMode
    denied: bool = False
    enforcement: str = "full"  # "full" or "partial: <missing parts>"
    runner: str | None = None
    runner_failed: bool = False
    runner_error: str | None = None
    #: Files a later host action runs or trusts (git hooks and config, shell,
    #: editor and agent configs) that the run created or changed.
    trusted_changed: tuple[str, ...] = ()
    #: Directories where those files could not be searched for (unreadable,
    #: too deep, too many entries): anything there is unreported, not absent.
    trusted_unsearched: tuple[str, ...] = ()
    #: Links and special files the run made inside a git dir (git writes
    #: through them, to files outside the sandbox), removed after the run.
    removed_from_git: tuple[str, ...] = ()
    #: One line on what the run was refused beyond ``denied`` (which a wider mode
    #: would allow): a connection under network-off, a runner's limitation, a
    #: read, git on a read-only ``.git``; or the profile key a denied write needs.
    refusal_note: str | None = None
    #: Hosts the network allowlist refused during the run, as the command named them.
    network_denied: tuple[str, ...] = ()
    #: Another command of the session ran under the same allowlist meanwhile:
    #: its refusals fall in the same window, so some of ``network_denied`` may be its.
    network_denied_shared: bool = False


@dataclass(frozen=True)
class ShellRunResult:
    exit_code: int | None  # None when killed by a signal
    signal: str | None  # e.g. "SIGKILL"
    timed_out: bool
    aborted: bool
    timeout_ms: int
    stdout: CollectedOutput
    stderr: CollectedOutput
    sandbox: SandboxFacts | None = None


@dataclass(frozen=True)
class ShellProcessRead:
    """New output since the last consuming read."""

    stdout: str
    stderr: str
    status: ProcessStatus
    exit_code: int | None
    signal: str | None
    lossy: bool = False  # bytes were dropped between reads
    stdout_spill: str | None = None
    stderr_spill: str | None = None


class OutputObserver(abc.ABC):
    """Non-consuming offset reader over an execution's captured streams."""

    @abc.abstractmethod
    def read(self, stream: StreamName, offset: int = 0) -> tuple[bytes, int]:
        """Bytes of ``stream`` from ``offset`` still held, and the next offset.

        If ``offset`` is older than what is retained, reading starts at the
        oldest retained byte (the returned offset says where the data ends).
        """

    def read_spilled(self, stream: StreamName, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of ``stream`` from ``offset`` that only the
        spill file still holds, read through the fd the host wrote it with
        (never by path).  Default: none kept."""
        return b""


class ShellExecution(abc.ABC):
    """One execution handle with foreground and background projections."""

    @property
    @abc.abstractmethod
    def status(self) -> ProcessStatus: ...

    @property
    @abc.abstractmethod
    def exit_code(self) -> int | None: ...

    @property
    @abc.abstractmethod
    def signal(self) -> str | None: ...

    @property
    @abc.abstractmethod
    def sandbox(self) -> SandboxFacts | None: ...

    @property
    @abc.abstractmethod
    def observed(self) -> OutputObserver: ...

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> bool:
        """``done``: wait for settlement; never raises.  True once settled."""

    @property
    def done(self) -> bool:
        return self.wait(0)

    @abc.abstractmethod
    def result(self, timeout: float | None = None) -> ShellRunResult:
        """Block until the command ends; raises only for infrastructure failure.

        With ``timeout`` (seconds), raises ``TimeoutError`` if still running.
        """

    @abc.abstractmethod
    def read_output(self) -> ShellProcessRead:
        """Incremental, consuming read of new output."""

    @abc.abstractmethod
    def kill(self) -> bool:
        """Kill the whole process group / sandbox.  Idempotent; False once done."""


class ShellExecutor(Service):
    """Service definition of ``ctx.require(ShellExecutor)``."""

    key: ClassVar[str] = "shell"
    #: Shell family, for tools: "bash" or "pwsh".
    shell_kind: ClassVar[str] = "bash"

    @property
    def sandbox_mode(self) -> SandboxMode | None:
        """The session's default mode when the executor constrains; else None."""
        return None

    @property
    def constraining(self) -> bool:
        mode = self.sandbox_mode
        return mode is not None and mode.constrains

    @abc.abstractmethod
    def resolve(self, request: ShellExecRequest) -> ShellExecSpec: ...

    @abc.abstractmethod
    def execute(self, spec: ShellExecSpec) -> ShellExecution: ...

    def run(self, spec: ShellExecSpec) -> ShellRunResult:
        """Foreground convenience: ``execute(spec).result()``."""
        return self.execute(spec).result()
