"""``ShellExecution``: one execution handle and its fused deadline.

The handle exists before the process does: the deadline starts when
``execute()`` is entered, so preparation (a runner's setup) counts against it.
Three causes can stop a command -- the deadline (``timeout``), the caller's
``AbortSignal`` (``abort``) and ``kill()`` -- and the first one wins: ``timed_out``
and ``aborted`` are never both true.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

from dsh.executors.capture import StreamCapture
from dsh.executors.pump import Pump
from dsh.executors.retention import trim_leading_partial, trim_trailing_partial
from dsh.executors.seam import (
    OutputObserver,
    ProcessStatus,
    SandboxFacts,
    ShellExecSpec,
    ShellExecution,
    ShellProcessRead,
    ShellRunResult,
    StreamName,
)
from dsh.executors.signal_names import signal_name
from dsh.sandbox.errors import process_limit_hint

StopCause = Literal["timeout", "abort", "kill", "spawn_failed"]
#: Called once at settlement: (exit_code, signal, stdout text, stderr text) -> facts.
FactsFn = Callable[[int | None, str | None, str, str], SandboxFacts | None]


class _Observer(OutputObserver):
    def __init__(self, streams: dict[str, StreamCapture]) -> None:
        self._streams = streams

    def read(self, stream: StreamName, offset: int = 0) -> tuple[bytes, int]:
        start, data = self._streams[stream].read_from(offset)
        return data, start + len(data)

    def read_spilled(self, stream: StreamName, offset: int, size: int) -> bytes:
        return self._streams[stream].read_spill(offset, size)


class LocalShellExecution(ShellExecution):
    """The handle ``execute()`` returns; settled by the pump's exit callback."""

    def __init__(
        self,
        spec: ShellExecSpec,
        *,
        stdout: StreamCapture,
        stderr: StreamCapture,
        deadline: float | None,
        facts: FactsFn | None = None,
    ) -> None:
        self.spec = spec
        self.deadline = deadline
        self._stdout = stdout
        self._stderr = stderr
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._observer = _Observer(self._streams)
        self._facts_fn = facts
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._cause: StopCause | None = None
        self._pump: Pump | None = None
        self._exit_code: int | None = None
        self._signal: str | None = None
        self._sandbox: SandboxFacts | None = None
        self._error: BaseException | None = None
        self._cursors = {"stdout": 0, "stderr": 0}
        self._read_lock = threading.Lock()
        if spec.signal is not None:
            spec.signal.add_callback(self._on_abort)

    # -- driving (the executor) -----------------------------------------------------
    def stop_before_start(self, cause: StopCause) -> bool:
        """Claim ``cause`` before the process exists; True if it won."""
        with self._lock:
            if self._cause is None:
                self._cause = cause
                return True
            return False

    @property
    def cause(self) -> StopCause | None:
        return self._cause

    def attach(self, pump: Pump) -> None:
        with self._lock:
            self._pump = pump
            stop = self._cause is not None and not self._settled.is_set()
        if stop:  # aborted while spawning: stop it now
            pump.terminate()

    def on_deadline(self) -> None:
        self._stop("timeout")

    def _on_abort(self) -> None:
        self._stop("abort")

    def _stop(self, cause: StopCause) -> bool:
        with self._lock:
            if self._settled.is_set() or self._cause is not None:
                return False
            self._cause = cause
            pump = self._pump
        if pump is not None:
            pump.terminate()
        return True

    def on_exit(self, pump: Pump) -> None:
        """Settle from the pump thread once the process is reaped."""
        status = pump.status
        exit_code = status.exit_code if status is not None else None
        sig = signal_name(status.signal) if status is not None and status.signal else None
        if pump.error is not None:
            self._error = pump.error
        self.settle(exit_code, sig)

    def settle(self, exit_code: int | None, sig: str | None, *, facts: SandboxFacts | None = None) -> None:
        sandbox = facts
        if sandbox is None and self._facts_fn is not None:
            try:
                sandbox = self._facts_fn(exit_code, sig, self._stdout.collected().text, self._stderr.collected().text)
            except Exception as exc:  # reported by result(), never by done/wait
                self._error = self._error or exc
        with self._lock:
            self._exit_code = exit_code
            self._signal = sig
            self._sandbox = sandbox
            self._settled.set()
        if self.spec.signal is not None:
            self.spec.signal.remove_callback(self._on_abort)

    def discard(self) -> None:
        """The handle will not be published (``execute`` raises): unhook it."""
        if self.spec.signal is not None:
            self.spec.signal.remove_callback(self._on_abort)

    def exec_failed(self, exit_code: int, message: str) -> None:
        """The program could not be executed (not found, not executable):
        settled with the exit status a shell gives (126/127), like a command
        that ran and failed, not one we stopped."""
        self._stderr.note(message)
        for capture in (self._stdout, self._stderr):
            capture.finish()
        self.settle(exit_code, None)

    def spawn_failed(self, reason: str, *, facts: SandboxFacts | None = None) -> None:
        self.stop_before_start("spawn_failed")
        self._stderr.note(f"spawn failed: {reason}{process_limit_hint(reason)}\n")
        for capture in (self._stdout, self._stderr):
            capture.finish()
        self.settle(None, None, facts=facts)

    # -- projections ------------------------------------------------------------------
    @property
    def status(self) -> ProcessStatus:
        if not self._settled.is_set():
            return "running"
        if self._cause is not None or self._signal is not None:
            return "killed"
        return "completed"

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def signal(self) -> str | None:
        return self._signal

    @property
    def sandbox(self) -> SandboxFacts | None:
        return self._sandbox

    @property
    def observed(self) -> OutputObserver:
        return self._observer

    @property
    def timed_out(self) -> bool:
        return self._cause == "timeout"

    @property
    def aborted(self) -> bool:
        return self._cause == "abort"

    def wait(self, timeout: float | None = None) -> bool:
        return self._settled.wait(timeout)

    def result(self, timeout: float | None = None) -> ShellRunResult:
        if not self._settled.wait(timeout):
            raise TimeoutError(f"command still running after {timeout}s")
        if self._error is not None:
            raise self._error
        return ShellRunResult(
            exit_code=self._exit_code,
            signal=self._signal,
            timed_out=self.timed_out,
            aborted=self.aborted,
            timeout_ms=self.spec.timeout_ms,
            stdout=self._stdout.collected(),
            stderr=self._stderr.collected(),
            sandbox=self._sandbox,
        )

    def read_output(self) -> ShellProcessRead:
        # Settlement is read first: output read after it is then complete.
        finished = self._settled.is_set()
        with self._read_lock:
            texts: dict[str, str] = {}
            lossy = False
            for name, capture in self._streams.items():
                text, lost = self._consume(name, capture, final=finished)
                texts[name] = text
                lossy = lossy or lost
        return ShellProcessRead(
            stdout=texts["stdout"],
            stderr=texts["stderr"],
            status=self.status if finished else "running",
            exit_code=self._exit_code if finished else None,
            signal=self._signal if finished else None,
            lossy=lossy,
            stdout_spill=self._stdout.spill_path if lossy else None,
            stderr_spill=self._stderr.spill_path if lossy else None,
        )

    def _consume(self, name: str, capture: StreamCapture, *, final: bool) -> tuple[str, bool]:
        cursor = self._cursors[name]
        start, data = capture.read_from(cursor)
        lost = start > cursor
        skip = trim_leading_partial(data) if lost else 0
        # Hold back a code point split at the end until its rest arrives.
        keep = len(data) if final else len(data) - trim_trailing_partial(data)
        self._cursors[name] = start + max(keep, skip)
        return data[skip:keep].decode("utf-8", errors="replace"), lost

    def kill(self) -> bool:
        with self._lock:
            if self._settled.is_set():
                return False
            if self._cause is None:
                self._cause = "kill"
            pump = self._pump
        if pump is not None:
            pump.terminate()
        return True
