"""The E2B runner: commands run in a remote E2B sandbox (one per runner instance).

What holds, per mode (how: ``session``, ``command``, ``sync``, ``archive``):
- every mode: the exact argv runs through ``setsid /bin/sh -c 'exec
  <shlex.join(argv)>'`` (no login shell); the host workspace is pushed to the
  sandbox (same path) before each command when it changed; nothing a command
  started outlives it (its process group and its run token are killed).
- read-only: runs as ``<user>-ro``, who cannot write the sandbox's copy of the
  workspace; nothing ever comes back to the host.
- workspace-write: runs as ``<user>`` (no sudo); after each command the regular
  files it changed under the workspace come back, validated as a whole;
  protected paths are never written back (that is how they stay read-only
  here).  Writes to other writable roots (``/tmp``...) stay in the sandbox.
- danger-full-access: runs as root in the sandbox; the workspace syncs back
  with the same checks.
- network off: ``allow_internet_access=False`` when the sandbox is created
  (the first command's policy decides; see ``_session_for``); an allowlist:
  E2B's own egress rules (``network``), by a degradation (``network``).
- limits: ``prlimit`` (processes, address space, file size).
Debug mode (a local envd, no E2B API) cannot apply the network setting and the
boundary is whatever runs that envd, so it is reported as degraded
(``e2b-debug``).
"""

from __future__ import annotations

import os
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from dsh.runners.e2b import network as egress
from dsh.runners.e2b.command import process_argv, pty_process_argv, remote_env, shell_script
from dsh.runners.e2b.options import E2BOptions
from dsh.runners.e2b.process import start_command
from dsh.runners.e2b.session import E2BSession, import_sdk, user_for
from dsh.sandbox import capability as cap
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import (
    ConfigKey,
    Enforcement,
    Gap,
    Launch,
    RemoteLaunch,
    RemoteProcess,
    Runner,
    RunnerPlan,
    RunnerProbe,
    address_space_limitation,
)
from dsh.sandbox.stdin_feed import StdinFeed

DEBUG_DEGRADATION = "e2b-debug"


class E2BRunner(Runner):
    name: ClassVar[str] = "e2b"
    remote: ClassVar[bool] = True
    separate_kernel: ClassVar[bool] = True
    #: Terminal sessions run on envd's PTY API (``terminal``), no relay.
    terminal_pty: ClassVar[Literal["sandbox", "host", "runner"]] = "runner"
    DEGRADATIONS: ClassVar[Mapping[str, tuple[cap.Capability, ...]]] = {
        "e2b-debug": (cap.SANDBOX_BOUNDARY, cap.NETWORK),
        egress.SNI_DEGRADATION: (cap.NETWORK_BY_NAME,),
    }
    network_by_name: ClassVar[bool] = True
    extra: ClassVar[str | None] = "e2b"
    CONFIG_KEYS: ClassVar[Mapping[str, ConfigKey]] = {
        "template": ConfigKey("The sandbox template (default: base).", example="base"),
        "api_key_env": ConfigKey(
            "The environment variable holding the E2B API key.", example="E2B_API_KEY", env_for="api_key",
            weakens="it chooses which of your secrets is sent to E2B",
        ),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.config = E2BOptions.parse(self.options)
        self._session: E2BSession | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._workspace_fd: int | None = None

    # -- probe and reports ---------------------------------------------------------
    def detect(self) -> RunnerProbe:
        try:
            e2b = import_sdk()
        except SandboxUnavailable as exc:
            return RunnerProbe(self.name, False, exc.reason)
        version = f"e2b {getattr(e2b, '__version__', None) or _dist_version()}"
        if self.config.debug:
            url = f"{self.config.sandbox_url.rstrip('/')}/health" if self.config.sandbox_url else ""
            try:
                with urllib.request.urlopen(url, timeout=5):
                    pass
            except OSError as exc:
                return RunnerProbe(self.name, False, f"no envd answers at {url} ({exc}); start "
                                   "it or fix the sandbox_url option", version)
            return RunnerProbe(self.name, True, None, version,
                               {"mode": "debug", "sandbox_url": self.config.sandbox_url})
        if not self.config.resolved_api_key():
            return RunnerProbe(self.name, False, "E2B_API_KEY not set (set it or the api_key "
                               "option; or point sandbox_url at a local envd for debug mode)",
                               version)
        return RunnerProbe(self.name, True, None, version,
                           {"template": self.config.template or "base",
                            "api_key": "set (checked when the first sandbox is created)"})

    def refuses_network_of(self, policy: SandboxPolicy) -> str | None:
        if not policy.constrained or policy.network_allowlist is None:
            return None
        return egress.refusal(policy.network_allowlist, debug=self.config.debug)

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        if policy.constrained and policy.network_allowlist is not None and not self.config.debug:
            return Enforcement.partial([egress.SNI_GAP])
        if not (self.config.debug and policy.constrained):
            return Enforcement.full()
        gaps = [Gap(DEBUG_DEGRADATION, f"debug mode: commands run wherever the envd at "
                 f"{self.config.sandbox_url} runs; no E2B sandbox boundary is verified")]
        if not policy.network:
            gaps.append(Gap(DEBUG_DEGRADATION, "debug mode makes no E2B API call, so "
                         "allow_internet_access=False (network off) is not applied"))
        return Enforcement.partial(gaps)

    def limitations(self, policy: SandboxPolicy) -> Mapping[str, str]:
        if policy.limits.max_memory_bytes is None:
            return {}
        # prlimit is all the runner has inside the remote machine: the limit
        # bounds each process's virtual reservations, not what it uses.
        return address_space_limitation(policy.limits.max_memory_bytes)

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        ws = policy.workspace
        user = user_for(policy.mode, self.config)
        rules = [f"sandbox: template {self.config.template or 'base'}, lifetime "
                 f"{self.config.timeout}s, one per session, killed at teardown",
                 f"workspace {ws} at the same path; host changes pushed (one tar) before "
                 "each command, hidden paths never sent",
                 f"command runs as {user} via setsid /bin/sh -c <shlex.join(argv)> (no login shell)"]
        if policy.mode is SandboxMode.READ_ONLY:
            rules.append(f"{user} cannot write the workspace copy; nothing syncs back")
        else:
            rules.append("after each command: regular files under the workspace sync back; "
                         "hardlinks, devices, fifos, absolute or '..' names reject the whole "
                         "archive; new symlinks and protected paths are never written back (reported)")
        rules.append("terminal sessions: envd's PTY API (Start with a pty of the session's size, "
                     "SendInput, Update), same argv line, user, sync and limits, no relay; signals go "
                     "to the pty's foreground process group, sent as root")
        limits = []
        for flag, value in (("processes", policy.limits.max_processes),
                            ("address space bytes", policy.limits.max_memory_bytes),
                            ("file size bytes", policy.limits.max_file_size_bytes)):
            if value is not None:
                limits.append(f"prlimit {flag} {value}")
        cannot = ["writes outside the workspace stay in the sandbox (not synced back)",
                  "empty directories and new symlinks are not synced back"]
        cannot += [
            "terminal sessions: whether the foreground program waits on the terminal (stdin_read) "
            "is looked up by a root python3 probe through envd once the output is quiet, so it "
            "lags the output by that command's round trip (without python3 in the image: never "
            "stdin_read but at the shell's prompt, and signals do not reach the session)",
            "terminal sessions: a process that leaves the session (setsid) and drops the run "
            "token from its environment outlives terminal_close until the runner's sandbox is "
            "killed, as with one-shot commands",
        ]
        cannot += list(self.enforcement(policy).missing)
        cannot += list(self.limitations(policy).values())
        network = ("on" if policy.network else egress.plan_line(policy.network_allowlist)
                   if policy.network_allowlist is not None else "off (allow_internet_access=False)")
        return RunnerPlan(self.name, policy.mode, tuple(rules), network, tuple(limits),
                          tuple(cannot))

    # -- launch ------------------------------------------------------------------------
    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> Launch:
        return self._launch(process_argv(shell_script(argv), policy.limits), policy, cwd, env, None)

    def wrap_terminal(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
                      env: Mapping[str, str], rows: int, cols: int) -> Launch:
        """On envd's PTY API (see ``terminal``), same user, sync, limits and teardown as ``wrap``."""
        return self._launch(pty_process_argv(shell_script(argv), policy.limits), policy, cwd, env,
                            (rows, cols))

    def _launch(self, command: list[str], policy: SandboxPolicy, cwd: str, env: Mapping[str, str],
                pty: tuple[int, int] | None) -> Launch:
        variables = remote_env(env)
        self._hold_workspace(policy)
        process_class = None
        if pty is not None:
            from dsh.runners.e2b.terminal import E2BTerminal

            process_class = E2BTerminal

        def start(stdin: bytes | StdinFeed | None, deadline: float | None) -> RemoteProcess:
            session = self._session_for(policy, deadline)
            if pty is not None and not hasattr(session.sandbox, "pty"):
                raise SandboxUnavailable("this e2b SDK has no PTY API (sandbox.pty); install the "
                                         "version dsh-sandbox was tested with (e2b 2.x)", runner=self.name)
            try:
                return start_command(session, command, policy, cwd=cwd, env=variables, stdin=stdin,
                                     deadline=deadline, pty=pty, process_class=process_class)
            except SandboxUnavailable:
                if not session.dead:
                    raise
            # The sandbox was gone before the command started (past its lifetime,
            # killed): nothing ran, so one retry in a new sandbox is safe.
            return start_command(self._session_for(policy, deadline), command, policy, cwd=cwd,
                                 env=variables, stdin=stdin, deadline=deadline, pty=pty,
                                 process_class=process_class)

        return RemoteLaunch(start=start)

    def _session_for(self, policy: SandboxPolicy, deadline: float | None) -> E2BSession:
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the runner was closed", runner=self.name)
            session = self._session
            if session is not None and session.dead:
                session.close()  # died mid-command: the next command gets a new sandbox
                session = self._session = None
            if session is None:
                session = self._session = E2BSession.open(self.config, policy, deadline, self._workspace_fd)
        if policy.workspace != session.workspace:
            raise SandboxUnavailable(
                f"this session's sandbox holds workspace {session.workspace}, not "
                f"{policy.workspace}; use one runner per workspace", runner=self.name)
        # Internet access is fixed when the sandbox is created: a later command that
        # wants network runs without it (stricter, never looser); one that wants it
        # off, or another allowlist, cannot run in a sandbox created with more.
        if session.network and not policy.network:
            raise SandboxUnavailable(
                "this session's sandbox was created with internet access; a command with "
                "network off cannot run in it (use a new session)", runner=self.name)
        if session.allowlist is not None and not policy.network and policy.network_allowlist != session.allowlist:
            raise SandboxUnavailable(
                "this session's sandbox was created with another network allowlist; a command with "
                "another network cannot run in it (use a new session)", runner=self.name)
        return session

    def _hold_workspace(self, policy: SandboxPolicy) -> None:
        """Keep an fd of the workspace the policy service pinned: the upload
        reads and the sync-back writes go through it, never through its name."""
        with self._lock:
            if self._workspace_fd is not None:
                return
        with self.pinned(policy) as pins:
            fd = pins.dup(policy.workspace)
        if fd is None:
            raise SandboxUnavailable(f"the workspace {policy.workspace} is not held by the policy",
                                     runner=self.name)
        with self._lock:
            if self._workspace_fd is None:
                self._workspace_fd, fd = fd, -1
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
            held, self._workspace_fd = self._workspace_fd, None
        if session is not None:
            session.close()
        if held is not None:
            os.close(held)


def _dist_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("e2b")
    except metadata.PackageNotFoundError:
        return "unknown"
