"""The subprocess service (``ctx.require(LocalSubprocessService)``): spawn, collect, spill, kill, reap.

Every command runs in a new session (its own process group).  One pump thread
per process multiplexes stdout, stderr, stdin, the process's exit fd and a wake
fd (pidfd and eventfd on Linux, portable stand-ins elsewhere), and also fires
the execution deadline and the SIGTERM->SIGKILL escalation, so a command costs one thread and no timers.

No zombie, no orphan:
- when the command's leader exits, whatever it left in its process group
  (double-forked daemons, SIGTERM-ignoring children) is SIGKILLed;
- the service makes this process a child subreaper (``reap_orphans``), so those
  orphans come back to us and are reaped by process group (``waitpid(-pgid)``),
  never touching children that other code owns;
- if this process dies (even by SIGKILL), an orphan killer (a process) started once per
  service sees its pipe hit EOF and SIGKILLs every process group still
  registered.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dsh.executors import interrupts
from dsh.executors.capture import StreamCapture
from dsh.executors.pump import ProcessTarget, Pump
from dsh.executors.seam import ENV_OVERRIDES
from dsh.executors.spill import SpillDir
from dsh.executors.targets import LocalTarget, RemoteTarget
from dsh.executors.watchdog import OrphanKiller
from dsh.sandbox.context import Service
from dsh.sandbox.errors import STARTED_AND_KILLED
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.runner import Launch, LocalLaunch, RemoteLaunch
from dsh.sandbox.stdin_feed import StdinFeed

SENSITIVE_ENV_PATTERN = LazyPattern(r"KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)
DSH_ENV_PREFIX = "DSH_"
_PR_SET_CHILD_SUBREAPER = 36
_PIPE_SIZE = 1 << 20  # fewer wake-ups for commands that write a lot


def scrub_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """Drop credential-shaped names and inherited ``DSH_*`` names."""
    return {
        k: v for k, v in environ.items() if not SENSITIVE_ENV_PATTERN.search(k) and not k.startswith(DSH_ENV_PREFIX)
    }


def layer_env(base: Mapping[str, str], env: Mapping[str, str], dsh_env: Mapping[str, str]) -> dict[str, str]:
    """``{**base, **ENV_OVERRIDES, **env, **dsh_env}``.

    The ``DSH_*`` namespace is rebuilt from ``dsh_env`` (the trusted snapshot)
    only: a caller's ``env`` cannot set or override a managed fact.
    """
    out = dict(base)
    out.update(ENV_OVERRIDES)
    out.update({k: v for k, v in env.items() if not k.startswith(DSH_ENV_PREFIX)})
    out.update({k: v for k, v in dsh_env.items() if k.startswith(DSH_ENV_PREFIX)})
    return out


@dataclass(frozen=True)
class SubprocessConfig:
    #: Make this process a child subreaper so orphans of killed commands are
    #: reaped here instead of depending on PID 1 (which may not reap at all).
    reap_orphans: bool = True
    #: Keep this session's spill files when it closes (for a caller that shows
    #: their paths to a person); removed by age at a later session's first spill.
    keep_spill_files: bool = False


class LocalSubprocessService(Service):
    """Provider of ``ctx.require(LocalSubprocessService)`` (plugin ``subprocess-local``)."""

    key: ClassVar[str] = "subprocess"
    Config: ClassVar[type[Any]] = SubprocessConfig
    auto_mount: ClassVar[bool] = True

    def __init__(self, ctx: Any, config: Any = None) -> None:
        super().__init__(ctx, config)
        self.orphan_killer = OrphanKiller()
        self._live: set[Pump] = set()
        self._lock = threading.Lock()
        self._spill_dir: SpillDir | None = None
        self._captures: weakref.WeakSet[StreamCapture] = weakref.WeakSet()
        self._closed = False
        self._subreaper = False

    # -- environment ------------------------------------------------------------
    def scrubbed_environ(self) -> dict[str, str]:
        return scrub_environ(os.environ)

    def build_env(self, base: Mapping[str, str], env: Mapping[str, str], dsh_env: Mapping[str, str]) -> dict[str, str]:
        return layer_env(base, env, dsh_env)

    # -- captures -----------------------------------------------------------------
    def spill_dir(self) -> SpillDir:
        """This service's private spill directory, outside every root the
        session's policy can make writable (made at the first spill)."""
        with self._lock:
            if self._spill_dir is None:
                self._spill_dir = SpillDir(self._writable_roots())
            return self._spill_dir

    def _writable_roots(self) -> list[Path]:
        # Imported here: a local executor's session has no policy to load.
        from dsh.sandbox.policy_service import PolicyService

        policy = self.ctx.get(PolicyService)
        return list(policy.trusted_roots()) if policy is not None else []

    def capture(self, name: str, *, max_bytes: int, max_spill_bytes: int) -> StreamCapture:
        capture = StreamCapture(name, max_bytes=max_bytes, max_spill_bytes=max_spill_bytes, spill_dir=self.spill_dir)
        self._captures.add(capture)
        return capture

    # -- spawning -----------------------------------------------------------------
    def spawn(
        self,
        launch: Launch,
        *,
        cwd: str,
        env: Mapping[str, str],
        stdin: bytes | StdinFeed | None,
        stdout: StreamCapture,
        stderr: StreamCapture,
        grace_ms: int,
        deadline: float | None = None,
        on_deadline: Callable[[], None] | None = None,
        on_exit: Callable[[Pump], None] | None = None,
        merge: bool = False,
    ) -> Pump:
        """Start ``launch`` and its pump; raises the spawn error (nothing runs).

        ``merge``: stdout and stderr as one stream in the order written (a
        local command gets one pipe for both; a remote one's two streams are
        taken in arrival order), collected in ``stdout``."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the subprocess service is closed")
        # A local process is known to close() only once it is in ``_live``: a
        # signal's exception waits until then.  (A remote start may take long
        # and its runner keeps its own record of what it started.)
        local = not isinstance(launch, RemoteLaunch)
        with interrupts.registering() if local else contextlib.nullcontext():
            return self._spawn(launch, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                               grace_ms=grace_ms, deadline=deadline, on_deadline=on_deadline,
                               on_exit=on_exit, merge=merge)

    def _spawn(
        self,
        launch: Launch,
        *,
        cwd: str,
        env: Mapping[str, str],
        stdin: bytes | StdinFeed | None,
        stdout: StreamCapture,
        stderr: StreamCapture,
        grace_ms: int,
        deadline: float | None,
        on_deadline: Callable[[], None] | None,
        on_exit: Callable[[Pump], None] | None,
        merge: bool = False,
    ) -> Pump:
        target: ProcessTarget
        if isinstance(launch, RemoteLaunch):
            try:
                remote = launch.start(stdin, deadline)
            except BaseException:
                if launch.cleanup is not None:
                    launch.cleanup()
                raise
            target = RemoteTarget(remote, launch)
            fds = (remote.stdout_fd, remote.stderr_fd)
            stdin_fd = None
            stdin = None
        else:
            target, fds, stdin_fd = self._spawn_local(launch, cwd=cwd, env=env, stdin=stdin, merge=merge)
        pump = Pump(
            target,
            stdout_fd=fds[0],
            stderr_fd=fds[1],
            stdin_fd=stdin_fd,
            stdin=stdin,
            captures=(stdout, stderr),
            grace_s=grace_ms / 1000,
            deadline=deadline,
            on_deadline=on_deadline,
            on_exit=self._finished(on_exit),
            merge=merge,
        )
        with self._lock:
            self._live.add(pump)
        try:
            pump.start()
        except Exception as exc:  # no thread to watch it: the pump killed it
            with self._lock:
                self._live.discard(pump)
            raise RuntimeError(f"{describe_error(exc)}: {STARTED_AND_KILLED}") from exc
        return pump

    def _finished(self, on_exit: Callable[[Pump], None] | None) -> Callable[[Pump], None]:
        def done(pump: Pump) -> None:
            with self._lock:
                self._live.discard(pump)
            if on_exit is not None:
                on_exit(pump)

        return done

    def _spawn_local(
        self, launch: LocalLaunch, *, cwd: str, env: Mapping[str, str], stdin: bytes | StdinFeed | None,
        merge: bool = False,
    ) -> tuple[LocalTarget, tuple[int, int], int]:
        self._become_subreaper()
        # A runner that wraps the command in host-side helpers starts them with a
        # fixed environment and hands the command its own further in.
        full_env = dict(launch.spawn_env) if launch.spawn_env is not None else {**env, **launch.env}
        # Every fd is made here, outside ``spawn_in``: a Landlock spawn thread
        # may not be allowed to open anything for writing by path.
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe()
        for fd in (out_r, err_r):
            _grow_pipe(fd)
        child_ends = (in_r, out_w, err_w)

        def spawn() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                list(launch.argv),
                stdin=in_r,
                stdout=out_w,
                stderr=out_w if merge else err_w,
                cwd=cwd,
                env=full_env,
                start_new_session=True,
                close_fds=True,
                pass_fds=launch.pass_fds,
            )

        try:
            popen = launch.spawn_in(spawn) if launch.spawn_in is not None else spawn()
        except BaseException:
            for fd in (*child_ends, out_r, err_r, in_w):
                os.close(fd)
            if launch.cleanup is not None:
                launch.cleanup()
            raise
        for fd in child_ends:
            os.close(fd)
        try:
            self.orphan_killer.register(popen.pid)
            target = LocalTarget(popen, launch, self.orphan_killer)
        except BaseException as exc:
            # No killer of orphans (it could not be started) or no exit fd:
            # never leave the command running with nothing to stop it.
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
            for fd in (out_r, err_r, in_w):
                os.close(fd)
            if isinstance(exc, Exception):
                raise RuntimeError(f"{describe_error(exc)}: {STARTED_AND_KILLED}") from exc
            raise
        return target, (out_r, err_r), in_w

    def _become_subreaper(self) -> None:
        if self._subreaper or not self.config.reap_orphans:
            return
        self._subreaper = True
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # not Linux: orphans go to init as usual

    # -- teardown -----------------------------------------------------------------
    @property
    def live(self) -> list[Pump]:
        with self._lock:
            return list(self._live)

    def close(self) -> None:
        """Kill (SIGTERM, then SIGKILL after grace) and reap everything started."""
        with self._lock:
            self._closed = True
            pumps = list(self._live)
        for pump in pumps:
            pump.terminate()
        for pump in pumps:
            if not pump.wait(pump.grace_s + 10):
                pump.force_kill()
                pump.wait(30)
        self.orphan_killer.close()
        with self._lock:
            spill_dir, self._spill_dir = self._spill_dir, None
            captures = list(self._captures)
        for capture in captures:
            capture.release()
        if spill_dir is not None:
            try:
                spill_dir.close(remove=not self.config.keep_spill_files)
            except OSError:
                pass  # removed meanwhile; a leftover is expired by age later


def _grow_pipe(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except (OSError, AttributeError):
        pass


def describe_error(exc: BaseException) -> str:
    """An exception as a spawn failure's note says it: an OS error by its text
    and file, anything else by its message, else its type."""
    if isinstance(exc, OSError) and exc.strerror:
        name = f" {exc.filename!r}" if exc.filename is not None else ""
        return f"{exc.strerror}{name}"
    return str(exc) or type(exc).__name__
