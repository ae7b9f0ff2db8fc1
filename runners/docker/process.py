"""One command as a Docker exec, driven like a local process (``RemoteProcess``).

- Output: the exec's hijacked connection carries Docker's multiplexed frames
  (8-byte header: stream id, 3 pad bytes, big-endian length).  A pump thread
  demultiplexes them into two ``os.pipe()``s, so stdout and stderr stay exactly
  separate, and closes the write ends at end of stream.
- Stdin: written by its own thread (so a large stdin cannot deadlock against
  unread output), then the socket's write side is shut down, which the daemon
  turns into EOF on the command's stdin.
- Exit: ``exec_inspect`` gives the exact code.  A process killed by signal N
  shows as 128+N; it is reported as ``signal=N`` only when this handle sent N
  (an ordinary ``exit 137`` stays an exit code).
- Kill: the tree killer of ``scripts.py`` in a second exec.  The same killer
  sweeps up once the command has exited, so nothing it started (a ``setsid``
  daemon, a ``nohup`` job) outlives it, as under a local runner's pid namespace.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from dsh.runners.docker.scripts import KILLER
from dsh.sandbox.runner import ExitStatus, RemoteProcess
from dsh.sandbox.stdin_feed import StdinFeed

log = logging.getLogger(__name__)
_HEADER = struct.Struct(">BxxxL")
_CHUNK = 65536


def _raw_socket(sock: Any) -> Any:
    """The real socket under the SDK's ``SocketIO`` wrapper (needed for shutdown)."""
    return getattr(sock, "_sock", sock)


def _recv_exactly(sock: Any, n: int) -> bytes | None:
    """``n`` bytes, or ``None`` at a clean end of stream (or a broken one)."""
    parts: list[bytes] = []
    while n:
        try:
            chunk = sock.recv(min(n, _CHUNK))
        except OSError:
            return None
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _api_errors() -> tuple[type[BaseException], ...]:
    """What a failing API call raises: the SDK's errors and, unwrapped, requests'."""
    from docker.errors import DockerException  # type: ignore[import-untyped]
    from requests.exceptions import RequestException

    return (DockerException, RequestException)


class DockerExec(RemoteProcess):
    """A running exec; create it with ``start_exec``."""

    def __init__(self, api: Any, container_id: str, exec_id: str, *, marker: str, slot: int,
                 user: str, sock: Any, stdin: bytes | StdinFeed | None,
                 on_release: Callable[[int], None],
                 on_unkillable: Callable[[], None]) -> None:
        self._api = api
        self._container_id = container_id
        self.exec_id = exec_id
        self.marker = marker
        self._slot = slot
        self._user = user
        self._sock = _raw_socket(sock)
        self._sock_wrapper = sock
        self._on_release = on_release
        self._on_unkillable = on_unkillable
        self._sent: set[int] = set()
        self._status: ExitStatus | None = None
        self._released = False
        self._sweep_lock = threading.Lock()
        self._swept = False
        self._lock = threading.Lock()
        self._eof = threading.Event()
        self.lost: str | None = None  # why the container went away mid-command
        self.stdout_fd, out_w = os.pipe()
        self.stderr_fd, err_w = os.pipe()
        self._pump = threading.Thread(target=self._demux, args=({1: out_w, 2: err_w},),
                                      name=f"docker-exec-{exec_id[:12]}", daemon=True)
        self._pump.start()
        self._feeder: threading.Thread | None = None
        self._stdin_feed = stdin if isinstance(stdin, StdinFeed) else None
        if stdin is not None:
            self._feeder = threading.Thread(target=self._feed, args=(stdin,), daemon=True)
            self._feeder.start()

    # -- streams -------------------------------------------------------------------
    def _demux(self, fds: dict[int, int]) -> None:
        live = dict(fds)
        try:
            while True:
                header = _recv_exactly(self._sock, _HEADER.size)
                if header is None:
                    return
                stream, size = _HEADER.unpack(header)
                payload = _recv_exactly(self._sock, size) if size else b""
                if payload is None:
                    return
                fd = live.get(2 if stream == 2 else 1)
                if fd is None:
                    continue  # the reader closed this stream: drain and discard
                try:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view):]
                except OSError:  # EPIPE: nobody reads it any more
                    os.close(live.pop(2 if stream == 2 else 1))
        finally:
            for fd in live.values():
                os.close(fd)
            self._eof.set()

    def _feed(self, data: bytes | StdinFeed) -> None:
        try:
            if isinstance(data, StdinFeed):
                for chunk in data.chunks():
                    self._sock.sendall(chunk)
            else:
                self._sock.sendall(data)
        except OSError:
            if isinstance(data, StdinFeed):
                data.abandon()
            pass  # the command exited without reading everything, like a closed pipe
        finally:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)

    # -- status --------------------------------------------------------------------
    def _inspect(self) -> ExitStatus | None:
        try:
            info = self._api.exec_inspect(self.exec_id)
        except _api_errors() as exc:
            # The container (or the daemon) went away: everything in it was killed.
            self.lost = f"the container went away while the command ran: {exc}"
            log.warning("docker: %s", self.lost)
            return self._finish(ExitStatus(exit_code=None, signal=signal.SIGKILL))
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        if not isinstance(code, int) or code < 0:
            return self._ended(ExitStatus(exit_code=None, signal=signal.SIGKILL))
        if code > 128 and code - 128 in self._sent:
            return self._ended(ExitStatus(exit_code=None, signal=code - 128))
        return self._ended(ExitStatus(exit_code=code))

    def _ended(self, status: ExitStatus) -> ExitStatus:
        """The command exited: what it left running dies with it (like a pid namespace)."""
        with self._sweep_lock:
            if not self._swept:
                self._swept = True
                self._signal_tree(signal.SIGKILL, attempts=2, escalate=False, orphans=True)
        return self._finish(status)

    def _finish(self, status: ExitStatus) -> ExitStatus:
        with self._lock:
            if self._status is None:
                self._status = status
            self._release()
            return self._status

    def _release(self) -> None:  # caller holds the lock
        if not self._released:
            self._released = True
            self._on_release(self._slot)

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        """Exit status once the exec ended; the stream's end is the cheap signal.

        The daemon closes an exec's stream when its process exits, so while the
        stream is open no API call is made; a slow poll still notices a daemon
        that stopped answering.
        """
        end = None if timeout is None else time.monotonic() + timeout
        last_poll = time.monotonic()
        while True:
            if self._status is not None:
                return self._status
            now = time.monotonic()
            if self._eof.is_set() or now - last_poll >= 2.0:
                last_poll = now
                status = self._inspect()
                if status is not None:
                    return status
            remaining = None if end is None else end - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            step = 0.02 if self._eof.is_set() else 0.5
            self._eof.wait(step if remaining is None else min(step, remaining))

    # -- kill ----------------------------------------------------------------------
    def kill(self, sig: int) -> None:
        """Signal every process of this command inside the container."""
        self._sent.add(int(sig))
        self._signal_tree(sig, attempts=5, escalate=sig == signal.SIGKILL)

    def _signal_tree(self, sig: int, *, attempts: int, escalate: bool, orphans: bool = False) -> None:
        from docker.errors import NotFound

        cmd = ["/bin/bash", "-c", KILLER, "dsh-kill", self.marker, str(self._slot), str(int(sig)),
               "orphans" if orphans else "tree"]
        for attempt in range(attempts):
            try:
                ex = self._api.exec_create(self._container_id, cmd, user=self._user)
                self._api.exec_start(ex["Id"])
                code = self._api.exec_inspect(ex["Id"]).get("ExitCode")
            except NotFound:
                return  # no container, nothing left to kill
            except _api_errors() as exc:
                log.warning("docker: kill exec failed (attempt %d): %s", attempt + 1, exc)
                code = None
            if code == 0:  # 1: SIGKILL left survivors; other codes: the exec did not start
                return
            time.sleep(0.2 * (attempt + 1))  # e.g. the pids limit is exhausted
        if escalate:
            # The killer cannot run or cannot finish: stop the whole container,
            # the only kill left.  The runner makes a fresh one for the next command.
            log.warning("docker: cannot kill exec %s in place; killing its container",
                        self.exec_id[:12])
            self._on_unkillable()

    def close(self) -> None:
        if self._stdin_feed is not None:
            self._stdin_feed.abandon()  # a feeder waiting for input ends
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock_wrapper.close()
        self._pump.join(timeout=10)
        if self._feeder is not None:
            self._feeder.join(timeout=10)
        # Closing the SDK's wrapper leaves the socket itself open (one
        # descriptor per command for as long as the process lives); closed
        # once the threads that use it are done, so its number is not reused under them.
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            self._release()


def start_exec(api: Any, container_id: str, argv: list[str], *, decode: bool, cwd: str,
               env: dict[str, str],
               user: str, stdin: bytes | StdinFeed | None, slot: int, marker: str,
               on_release: Callable[[int], None],
               on_unkillable: Callable[[], None]) -> DockerExec:
    """Create and start the exec of ``argv`` (exact, as separate arguments)."""
    from dsh.runners.docker.scripts import MARKER_VAR, WRAPPER, WRAPPER_DECODING

    cmd = ["/bin/sh", "-c", WRAPPER_DECODING if decode else WRAPPER, "sh", str(slot), *argv]
    ex = api.exec_create(container_id, cmd, stdin=stdin is not None, stdout=True, stderr=True,
                         workdir=cwd, environment={**env, MARKER_VAR: marker}, user=user)
    sock = api.exec_start(ex["Id"], socket=True)
    return DockerExec(api, container_id, ex["Id"], marker=marker, slot=slot, user=user,
                      sock=sock, stdin=stdin, on_release=on_release,
                      on_unkillable=on_unkillable)
