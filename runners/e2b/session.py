"""One E2B sandbox per runner instance: creation, setup, commands, sync, teardown.

Setup (once, lazily, on the first command; it counts against that command's
deadline):

1. ``Sandbox.create`` (``allow_internet_access=False`` unless the first
   policy wants network; E2B's egress rules for an allowlist).  In debug mode the SDK makes no API call, so the
   envd's ``/health`` is checked instead.
2. As root: create two unprivileged users, ``<user>`` (workspace-write) and
   ``<user>-ro`` (read-only).  Each is checked to have no ``sudo`` (the
   template's default user has passwordless sudo, so it is no boundary).
3. The first ``sync.push``: the workspace, as one tar, at the host's own path.

Before every command the workspace is pushed again if the host changed it;
after workspace-write and danger-full-access commands it is pulled back (see
``sync``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any, Protocol

from dsh.runners.e2b.command import tree_kill_script
from dsh.runners.e2b.network import create_args
from dsh.runners.e2b.options import E2BOptions
from dsh.runners.e2b.sync import WorkspaceSync
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.stdin_feed import StdinFeed

RUNNER = "e2b"
_KILL_TIMEOUT = 30.0
# The stream deadline of a user command: past the executor's deadline (the
# executor kills on time through ``kill``), a backstop if that never comes.
BACKSTOP_MARGIN_S = 60.0


def import_sdk() -> Any:
    try:
        import e2b
    except ImportError:
        raise SandboxUnavailable(
            "the e2b SDK is not installed; pip install 'dsh-sandbox[e2b]'", runner=RUNNER
        ) from None
    return e2b


def unavailable(exc: BaseException, what: str) -> SandboxUnavailable:
    """Map an SDK failure to ``SandboxUnavailable`` with a reason a person can act on."""
    e2b = import_sdk()
    if isinstance(exc, SandboxUnavailable):
        return exc
    if isinstance(exc, e2b.AuthenticationException):
        reason = f"E2B rejected the API key ({exc}); check E2B_API_KEY or the api_key option"
    elif isinstance(exc, e2b.SandboxNotRunningException | e2b.SandboxNotFoundException):
        reason = f"{what}: the sandbox is gone (killed or past its timeout): {exc}"
    elif isinstance(exc, e2b.SandboxUnreachableException):
        reason = f"{what}: the sandbox cannot be reached: {exc}"
    elif isinstance(exc, e2b.CommandExitException):
        output = (exc.stderr or exc.stdout or "").strip()[-500:]
        killed = exc.exit_code == -1 and "signal: killed" in (exc.error or "")
        reason = (f"{what}: timed out" if killed else f"{what}: exited {exc.exit_code}: {output}")
    elif isinstance(exc, e2b.TimeoutException):
        reason = f"{what}: timed out: {exc}"
    else:
        reason = f"{what}: {type(exc).__name__}: {exc}"
    return SandboxUnavailable(reason, runner=RUNNER)


def user_for(mode: SandboxMode, options: E2BOptions) -> str:
    return {SandboxMode.READ_ONLY: options.readonly_user,
            SandboxMode.WORKSPACE_WRITE: options.user,
            SandboxMode.DANGER_FULL_ACCESS: "root"}[mode]


class LiveCommand(Protocol):
    """A user command the session kills when it closes (an ``E2BProcess``)."""

    token: str

    def kill(self, sig: int) -> None: ...


class E2BSession:
    def __init__(self, options: E2BOptions, sandbox: Any, policy: SandboxPolicy, root_fd: int | None = None) -> None:
        self.options = options
        self.sandbox = sandbox
        self.workspace = policy.workspace
        self.network = policy.network
        self.allowlist = None if policy.network else policy.network_allowlist
        self.dead = False
        self.closing = False  # teardown: commands it kills are not synced back
        self.live: set[LiveCommand] = set()
        # Run tokens of commands whose stream has not ended, registered before
        # the start request: a start interrupted after envd launched the
        # command (a signal to the CLI, a failed reply) leaves no handle, but
        # its processes still carry the token and are killed by it at close.
        self.unsettled: set[str] = set()
        self._lock = threading.Lock()
        self.sync = WorkspaceSync(self, policy, root_fd)

    # -- lifecycle ---------------------------------------------------------------
    @classmethod
    def open(cls, options: E2BOptions, policy: SandboxPolicy, deadline: float | None,
             root_fd: int | None = None) -> E2BSession:
        e2b = import_sdk()
        if str(policy.workspace) == "/":
            raise SandboxUnavailable("the workspace cannot be / (it is synced as one archive)",
                                     runner=RUNNER)
        try:
            sandbox = e2b.Sandbox.create(
                template=options.template, timeout=options.timeout, metadata={"dsh-sandbox": "1"},
                **create_args(policy, debug=options.debug), **options.sdk_params())
        except Exception as exc:
            raise unavailable(exc, "creating the E2B sandbox") from exc
        session = cls(options, sandbox, policy, root_fd)
        try:
            if options.debug and not sandbox.is_running():
                raise SandboxUnavailable(f"the envd at {options.sandbox_url} is not running",
                                         runner=RUNNER)
            session._setup(policy, deadline)
        except BaseException as exc:
            session.close()
            if isinstance(exc, Exception):
                raise unavailable(exc, f"setting up the sandbox (envd {sandbox.envd_api_url})") from exc
            raise
        return session

    def _setup(self, policy: SandboxPolicy, deadline: float | None) -> None:
        rw, ro = self.options.user, self.options.readonly_user
        timeout = self.budget(deadline, self.options.setup_timeout, "sandbox setup")
        self.run_internal(
            "set -eu\n"
            # 9: the user exists (a debug envd reused across sessions)
            f"useradd --create-home --user-group --shell /bin/sh {rw} || [ $? -eq 9 ]\n"
            f"useradd --create-home --user-group --shell /bin/sh {ro} || [ $? -eq 9 ]\n",
            what="creating the sandbox users", timeout=timeout)
        for user in (rw, ro):
            self.run_internal(
                'if sudo -n true >/dev/null 2>&1; then echo "$USER has sudo" >&2; exit 1; fi',
                user=user, timeout=timeout,
                what=f"checking that {user} has no sudo (the template grants it: no boundary)")
        # The workspace copy belongs to the read-write user; git refuses a repository
        # owned by someone else ("dubious ownership"), so read-only `git status`
        # would fail.  The read-only user trusts every repository (git 2.39 has no
        # "below this path" form); it only ever reads the workspace copy, whose
        # code it runs anyway.
        self.run_internal(
            "command -v git >/dev/null || exit 0\n"
            "git config --global --get-all safe.directory | grep -qx '[*]' || "
            "git config --global --add safe.directory '*'",
            user=ro, timeout=timeout, what="letting the read-only user's git read the workspace copy")
        self.sync.push(self.budget(deadline, self.options.setup_timeout, "sandbox setup"))

    def close(self) -> None:
        """Kill what still runs (debug mode's ``kill`` is a no-op), then the sandbox."""
        self.closing = True
        with self._lock:
            live, self.live = list(self.live), set()
            stray, self.unsettled = self.unsettled - {p.token for p in live}, set()
        if not self.dead:
            for proc in live:
                proc.kill(9)
            for token in sorted(stray):
                self.kill_tree(0, 9, token, group=False)
        try:
            self.sandbox.kill()
        except Exception:
            pass  # already gone: nothing left to kill
        self.dead = True

    # -- commands ------------------------------------------------------------------
    def start_stream(self, argv: list[str], *, user: str, cwd: str, envs: Mapping[str, str],
                     stdin: bool, timeout: float | None,
                     pty: tuple[int, int] | None = None) -> tuple[int, Iterator[Any]]:
        """envd ``Start`` with an exact ``cmd``/``args`` (see ``command``); (pid, events).

        ``pty`` (rows, cols): on a pty of envd's (what the SDK's ``pty.create``
        sends, which itself always starts ``/bin/bash -i -l``: a login shell
        reading profile files a sandboxed command can write, not the exact argv)."""
        from e2b.connection_config import KEEPALIVE_PING_HEADER, KEEPALIVE_PING_INTERVAL_SEC
        from e2b.envd.process import process_pb
        from e2b.envd.rpc import handle_rpc_exception_with_health
        from e2b.envd.utils import authentication_header, extract_start_pid, timeout_to_ms

        commands = self.sandbox.commands
        try:
            rpc, check_health = commands._rpc, commands._check_health
        except AttributeError:
            raise SandboxUnavailable(
                "this e2b SDK version has no envd process client (commands._rpc); "
                "install the version dsh-sandbox was tested with (e2b 2.x)", runner=RUNNER) from None
        config = process_pb.ProcessConfig(cmd=argv[0], args=argv[1:], envs=dict(envs), cwd=cwd)
        if pty is None:
            request = process_pb.StartRequest(process=config, stdin=stdin)
        else:
            size = process_pb.PTY.Size(rows=pty[0], cols=pty[1])
            request = process_pb.StartRequest(process=config, pty=process_pb.PTY(size=size))
        headers = {**authentication_header(self.sandbox._envd_version, user),
                   KEEPALIVE_PING_HEADER: str(KEEPALIVE_PING_INTERVAL_SEC)}
        events = rpc.start(request, headers=headers, timeout_ms=timeout_to_ms(timeout))
        try:
            pid = extract_start_pid(next(events), "start process")
        except Exception as exc:
            events.close()
            raise handle_rpc_exception_with_health(exc, check_health) from exc
        return pid, events

    def run_internal(self, script: str, *, what: str, user: str = "root",
                     timeout: float = _KILL_TIMEOUT, check: bool = True) -> str:
        """Run one of the runner's own scripts; its failure is ``SandboxUnavailable``.

        Uses the SDK's ``CommandHandle.wait``: a non-zero exit raises
        ``CommandExitException`` (exit code and output kept in the reason).
        """
        e2b = import_sdk()
        try:
            pid, events = self.start_stream(["/bin/sh", "-c", script], user=user, cwd="/",
                                            envs={}, stdin=False, timeout=timeout)
            commands = self.sandbox.commands
            handle = e2b.CommandHandle(pid=pid, handle_kill=lambda: commands.kill(pid),
                                       events=events, check_health=commands._check_health)
            result = handle.wait()
        except Exception as exc:
            self.note_failure(exc)
            if not check:
                return ""
            raise unavailable(exc, what) from exc
        return str(result.stdout)

    def note_failure(self, exc: BaseException) -> None:
        """Mark the session dead when ``exc`` says the sandbox is gone or unreachable."""
        e2b = import_sdk()
        gone = (e2b.SandboxNotRunningException, e2b.SandboxNotFoundException,
                e2b.SandboxUnreachableException)
        if isinstance(exc, gone) or isinstance(exc.__cause__, gone):
            self.dead = True

    def kill_tree(self, pid: int, sig: int, token: str, *, group: bool, session: bool = False) -> None:
        """Signal the command's tree (see ``tree_kill_script``); if that cannot run
        and the leader still does, envd's SendSignal (SIGKILL) on the leader."""
        try:
            self.run_internal(tree_kill_script(pid, sig, token, group=group, session=session),
                              what="killing the command")
        except SandboxUnavailable:
            if group:
                try:
                    self.sandbox.commands.kill(pid)
                except Exception:
                    pass  # the process (or the sandbox) is already gone

    def send_stdin(self, pid: int, data: bytes | StdinFeed) -> None:
        commands = self.sandbox.commands
        try:
            if isinstance(data, StdinFeed):
                for chunk in data.chunks(64 << 10):
                    commands.send_stdin(pid, chunk)
            else:
                for offset in range(0, len(data), 64 << 10):
                    commands.send_stdin(pid, data[offset:offset + (64 << 10)])
            commands.close_stdin(pid)
        except Exception:
            if isinstance(data, StdinFeed):
                data.abandon()
            pass  # the command exited without reading all of it, as with a local pipe

    # -- files ------------------------------------------------------------------------
    def upload(self, path: str, data: IO[bytes] | bytes, timeout: float) -> None:
        try:
            self.sandbox.files.write(path, data, user="root", request_timeout=timeout)
        except Exception as exc:
            raise unavailable(exc, f"uploading {path}") from exc

    def download(self, path: str, out: IO[bytes], timeout: float) -> None:
        try:
            reader = self.sandbox.files.read(path, format="stream", user="root",
                                             request_timeout=timeout)
            with reader:
                for chunk in reader:
                    out.write(chunk)
        except Exception as exc:
            raise unavailable(exc, f"downloading {path}") from exc

    def budget(self, deadline: float | None, cap: float, what: str) -> float:
        if deadline is None:
            return cap
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxUnavailable(f"{what} did not finish before the command's deadline",
                                     runner=RUNNER)
        return min(cap, left)
