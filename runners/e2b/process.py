"""A command running in the E2B sandbox, driven like a local process.

A pump thread reads envd's ``Start`` stream and writes the *bytes* of each
stdout/stderr chunk into OS pipes (the SDK's ``CommandHandle`` would decode
them as UTF-8 with replacement, which loses bytes).  The stream's end event
gives the exit status; then, for modes that write, the workspace is synced
back before ``wait()`` returns (notes about it go to stderr).

How each way of ending maps:
- end event: exit code, or ``exit -1`` + ``"signal: killed"`` (envd's
  timeout shape, and any kill) -> ``ExitStatus(None, SIGKILL)``;
- the SDK's ``TimeoutException`` (the stream's own deadline, a backstop set
  beyond the executor's deadline): the tree is killed -> ``ExitStatus(None,
  SIGKILL)``;
- the sandbox dies or becomes unreachable mid-command -> ``ExitStatus(None,
  SIGKILL)`` with a ``dsh: e2b:`` note on stderr; the session is marked dead
  (the next command gets a new sandbox).
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from dsh.runners.e2b.archive import SyncBackRefused
from dsh.runners.e2b.command import RUN_MARKER, exit_status
from dsh.runners.e2b.session import BACKSTOP_MARGIN_S, E2BSession, import_sdk, unavailable, user_for
from dsh.sandbox.errors import SandboxUnavailable, WorkdirError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import ExitStatus, RemoteProcess
from dsh.sandbox.stdin_feed import StdinFeed

_KILLED = ExitStatus(None, int(signal.SIGKILL))


class E2BProcess(RemoteProcess):
    def __init__(self, session: E2BSession, pid: int, token: str, events: Iterator[Any],
                 policy: SandboxPolicy, *, sync_back: bool, stdin: bytes | StdinFeed | None) -> None:
        self.session = session
        self.pid = pid
        self.token = token  # the command's RUN_MARKER value
        self.policy = policy
        self._events = events
        self._sync_back = sync_back
        self.stdout_fd, self._stdout_w = os.pipe()
        self.stderr_fd, self._stderr_w = os.pipe()
        self._status: ExitStatus | None = None
        self._done = threading.Event()
        self._reader_gone: set[int] = set()
        self._stream_over = False
        # Held while writing to the pipes and while closing them: another thread
        # (a terminal's status lines) never writes to a closed (reused) fd.
        self._io_lock = threading.Lock()
        self._io_closed = False
        self._out_bytes = 0  # stdout bytes written so far
        self._pump = threading.Thread(target=self._run, name=f"e2b-pump-{pid}", daemon=True)
        self._pump.start()
        self._stdin_feed = stdin if isinstance(stdin, StdinFeed) else None
        if stdin is not None:
            threading.Thread(target=self._feed_input, args=(stdin,),
                             name=f"e2b-stdin-{pid}", daemon=True).start()

    def _feed_input(self, stdin: bytes | StdinFeed) -> None:
        self.session.send_stdin(self.pid, stdin)

    # -- RemoteProcess -------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        self._done.wait(timeout)
        return self._status if self._done.is_set() else None

    def kill(self, sig: int) -> None:
        """Signal the command's tree; after it ended, what it left behind (by token)."""
        if not self.session.dead:
            self.session.kill_tree(self.pid, sig, self.token, group=not self._stream_over)

    def close(self) -> None:
        """Wait for the pump (it ends once the stream does, bounded by the SDK's
        timeouts); a pump still stuck after that is left to its daemon thread."""
        self._done.wait(self.session.options.sync_timeout + self.session.options.request_timeout)
        if self._stdin_feed is not None:
            self._stdin_feed.abandon()  # a feeder waiting for input ends

    # -- pump ------------------------------------------------------------------------
    def _run(self) -> None:
        notes: list[str] = []
        status: ExitStatus | None = None
        try:
            status = self._stream()
            if status is None:
                notes.append("dsh: e2b: the command's stream ended without an exit status")
                status = _KILLED
        except Exception as exc:
            status = _KILLED
            notes.append(self._stream_failure(exc))
        self._stream_over = True
        try:
            if not self.session.dead:
                # Like a local command: nothing it started outlives it (background
                # jobs, setsid daemons), and the sync-back sees the final state.
                self.session.kill_tree(self.pid, int(signal.SIGKILL), self.token, group=False)
            if self._sync_back and not self.session.dead and not self.session.closing:
                notes += self._sync()
            for note in notes:
                self._write(self._stderr_w, f"\n{note}\n".encode())
        finally:  # whatever happened, the executor must see EOF and an exit status
            with self._io_lock:
                self._io_closed = True
                os.close(self._stdout_w)
                os.close(self._stderr_w)
            with self.session._lock:
                self.session.live.discard(self)
                self.session.unsettled.discard(self.token)
                self._status = status
                self._done.set()

    def _stream(self) -> ExitStatus | None:
        status = None
        for response in self._events:
            event = response.event.event if response.event is not None else None
            if event is None:
                continue
            if event.field == "data":
                output = event.value.output
                if output is not None and output.field in ("stdout", "stderr", "pty"):
                    fd = self._stderr_w if output.field == "stderr" else self._stdout_w
                    self._write(fd, output.value)
                    if fd == self._stdout_w:
                        self._output_written(len(output.value))
            elif event.field == "end":
                end = event.value
                status = exit_status(
                    end.exit_code, end.status if end.has_field("status") else None,
                    end.error if end.has_field("error") else None)
        return status

    def _stream_failure(self, exc: Exception) -> str:
        import e2b
        from e2b.envd.rpc import handle_rpc_exception_with_health

        mapped = handle_rpc_exception_with_health(exc, self.session.sandbox.commands._check_health)
        if isinstance(mapped, e2b.SandboxNotRunningException | e2b.SandboxUnreachableException):
            self.session.dead = True
            return f"dsh: e2b: the sandbox died mid-command: {mapped}"
        if isinstance(mapped, e2b.TimeoutException):
            self.session.kill_tree(self.pid, int(signal.SIGKILL), self.token, group=True)
            return "dsh: e2b: the command's stream deadline passed; the command was killed"
        # Connection-level failures the SDK could not classify: treat as lost.
        self.session.dead = True
        return f"dsh: e2b: lost the connection to the sandbox mid-command: {mapped}"

    def _sync(self) -> list[str]:
        try:
            return self.session.sync.pull(self.policy)
        except SyncBackRefused as exc:
            return [f"dsh: e2b: sync-back refused, nothing was written to the host: {exc}"]
        except SandboxUnavailable as exc:
            return [f"dsh: e2b: sync-back failed, nothing was written to the host: {exc.reason}"]
        except OSError as exc:
            return [f"dsh: e2b: sync-back failed writing the host workspace "
                    f"(rolled back): {exc}"]
        except Exception as exc:  # a runner bug must not hang the executor
            return [f"dsh: e2b: sync-back failed: {type(exc).__name__}: {exc}"]

    def _output_written(self, size: int) -> None:
        self._out_bytes += size

    def _write(self, fd: int, data: bytes) -> None:
        """Write all of ``data``; once the reader closed its end, drop output."""
        view = memoryview(data)
        while view and fd not in self._reader_gone:
            try:
                view = view[os.write(fd, view):]
            except OSError:  # EPIPE: the executor closed its end and wants no more
                self._reader_gone.add(fd)


def start_command(session: E2BSession, argv: list[str], policy: SandboxPolicy, *, cwd: str,
                  env: Mapping[str, str], stdin: bytes | StdinFeed | None, deadline: float | None,
                  pty: tuple[int, int] | None = None,
                  process_class: type[E2BProcess] | None = None) -> E2BProcess:
    """Start one user command as the mode's user; the stream's own deadline is a
    backstop past the executor's (which kills on time through ``kill``).
    ``pty`` (rows, cols): on envd's pty, driven by ``process_class``."""
    session.sync.push(session.budget(deadline, session.options.sync_timeout, "syncing the workspace in"))
    margin = BACKSTOP_MARGIN_S
    backstop = None if deadline is None else max(deadline - time.monotonic(), 0) + margin
    e2b = import_sdk()
    token = secrets.token_hex(8)
    with session._lock:
        session.unsettled.add(token)
    try:
        pid, events = session.start_stream(
            argv, user=user_for(policy.mode, session.options), cwd=cwd,
            envs={**env, RUN_MARKER: token}, stdin=stdin is not None, timeout=backstop, pty=pty)
    except e2b.InvalidArgumentException as exc:
        if "cwd" in str(exc):
            raise WorkdirError(f"e2b: working directory {cwd} does not exist in the "
                               f"sandbox (only the workspace {session.workspace} is synced)"
                               ) from exc
        raise unavailable(exc, "starting the command") from exc
    except Exception as exc:
        session.note_failure(exc)
        raise unavailable(exc, "starting the command") from exc
    proc = (process_class or E2BProcess)(session, pid, token, events, policy, stdin=stdin,
                                         sync_back=policy.mode is not SandboxMode.READ_ONLY)
    with session._lock:
        if proc.wait(0) is None:
            session.live.add(proc)
    return proc
