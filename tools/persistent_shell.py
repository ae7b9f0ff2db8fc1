"""Persistent ``bash`` and ``pwsh`` tools: one shell per owner on a terminal session, kept across calls.

Mounting ``persistent-shells`` swaps the one-shot ``bash`` tool for this one.
Each command is typed as one line that prints
``__DSH_PERSISTENT_BASH_START_<nonce>__``, ``eval``s the command (decoded from
base64, so the exact text runs and nothing of it is echoed as a marker) and
prints ``__DSH_PERSISTENT_BASH_END_<nonce>:<status>``; the markers are built
by ``printf`` at run time, so the echo of the typed line never contains them.
What lies between is the output, stripped of terminal controls and cut to a
character budget.  One command at a time per owner; a timeout or ``exit``
closes the shell and the next call starts a fresh one; a foreground program
that waits for input returns what it printed so far and the shell is
closed with it.  An escalated command runs once in a fresh one-shot shell,
as with the one-shot tools: a wider mode never leaks into the persistent one.
"""

from __future__ import annotations

import base64
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dsh.executors.seam import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS
from dsh.executors.terminal_registry import TerminalRegistry, TerminalSession
from dsh.executors.terminal_seam import Dialect, TerminalError, TerminalOpenRequest, TerminalSendRequest
from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import DshError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.policy_service import PolicyService
from dsh.sandbox.trusted_changes import Baseline, run_started_ns
from dsh.tools.base import Tool, ToolResult
from dsh.tools.render import (
    join_rendered,
    left_behind_notes,
    sandbox_marker,
    status_marker,
    timeout_marker,
)
from dsh.tools.shell_tool import BASH, PWSH, ShellTool
from dsh.tools.spec import ToolSpec, object_schema

_CONTROLS = LazyPattern(rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


class ShellBusyError(DshError):
    code = "SHELL_BUSY"


@dataclass(frozen=True)
class PersistentShellsConfig:
    #: Characters of output a call returns at most (the tail is kept).
    max_output_chars: int = 30_000
    #: Offer the persistent ``pwsh`` tool too (the backend's pwsh dialect).
    pwsh: bool = False
    rows: int = 50
    cols: int = 200


class PersistentShells(Service):
    """Provider ``persistent-shells``: which session is each owner's shell, and its lock."""

    key: ClassVar[str] = "persistent-shells"
    Config: ClassVar[type[Any]] = PersistentShellsConfig
    requires: ClassVar[tuple[type[Service], ...]] = (TerminalRegistry,)
    config: PersistentShellsConfig

    def __init__(self, ctx: Context, config: PersistentShellsConfig | None = None) -> None:
        super().__init__(ctx, config)
        self._sessions: dict[tuple[str, str], str] = {}
        self._opened_ns: dict[str, int] = {}  # session id -> when it was opened
        # Session id -> what its next command is judged against: the host as
        # the last judgment (or the shell's opening) left it.
        self._baselines: dict[str, Baseline] = {}
        self._busy: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def claim(self, owner: str, dialect: str) -> None:
        with self._lock:
            if (owner, dialect) in self._busy:
                raise ShellBusyError(f"your {dialect} shell is still running a command; one command at a time")
            self._busy.add((owner, dialect))

    def release(self, owner: str, dialect: str) -> None:
        with self._lock:
            self._busy.discard((owner, dialect))

    def session(self, owner: str, dialect: Dialect) -> TerminalSession:
        registry = self.ctx.require(TerminalRegistry)
        with self._lock:
            known = self._sessions.get((owner, dialect))
        if known is not None:
            try:
                entry = registry.get(known, owner)
                if entry.session.alive:
                    return entry
                registry.close_session(known, owner)
            except TerminalError:
                pass
        opened_ns = run_started_ns()
        service = self.ctx.get(PolicyService)
        before = service.baseline(service.resolve(None)) if service is not None else None
        entry = registry.open(owner, TerminalOpenRequest(
            name=f"persistent-{dialect}-{secrets.token_hex(3)}", dialect=dialect,
            rows=self.config.rows, cols=self.config.cols))
        with self._lock:
            self._sessions[(owner, dialect)] = entry.id
            self._opened_ns[entry.id] = opened_ns
            if before is not None:
                self._baselines[entry.id] = before
        return entry

    def judge(self, session_id: str) -> tuple[tuple[Path, ...], tuple[Path, ...], tuple[Path, ...]]:
        """After a command of the shell ``session_id``: the trusted files
        created or changed since the last judgment (a repository it made
        with a planted fsmonitor, a hook), the links removed from git dirs
        (any made since the shell opened: what it left running may plant
        between two commands) and where nothing could be searched."""
        service = self.ctx.get(PolicyService)
        if service is None:
            return (), (), ()
        policy = service.resolve(None)
        with self._lock:
            before = self._baselines.pop(session_id, None)
        changed: tuple[Path, ...] = ()
        removed: tuple[Path, ...] = ()
        unsearched: tuple[Path, ...] = ()
        if before is not None:
            changes = service.changed_files(policy, before)
            changed, removed, unsearched = changes.paths, changes.removed, changes.unsearched
            after = service.baseline(policy)  # the search just made, from now on
            with self._lock:
                if after is not None and session_id in self._sessions.values():  # not discarded
                    self._baselines[session_id] = after
        more_removed, too_large = service.remove_git_links(policy, self.opened_ns(session_id))
        return (changed, tuple(dict.fromkeys((*removed, *more_removed))),
                tuple(dict.fromkeys((*unsearched, *too_large))))

    def opened_ns(self, session_id: str) -> int:
        """When the shell ``session_id`` was opened (0 if unknown: everything counts)."""
        with self._lock:
            return self._opened_ns.get(session_id, 0)

    def discard(self, owner: str, dialect: str) -> None:
        with self._lock:
            known = self._sessions.pop((owner, dialect), None)
        if known is not None:
            try:
                self.ctx.require(TerminalRegistry).close_session(known, owner)
            except TerminalError:
                pass


def marker_line(command: str, nonce: str, dialect: str) -> str:
    encoded = base64.b64encode(command.encode("utf-8")).decode()
    if dialect == "pwsh":
        return (f"Write-Output ('__DSH_PERSISTENT_BASH_{{0}}_{nonce}__' -f 'START'); "
                f"Invoke-Expression ([Text.Encoding]::UTF8.GetString([Convert]::FromBase64String('{encoded}'))); "
                f"$__dsh = if ($?) {{ 0 }} else {{ 1 }}; "
                f"Write-Output ('__DSH_PERSISTENT_BASH_{{0}}_{nonce}:' -f 'END' + $__dsh)")
    return (f"printf '__DSH_PERSISTENT_BASH_%s_{nonce}__\\n' START; "
            f"eval \"$(printf %s '{encoded}' | base64 -d)\"; "
            f"printf '\\n__DSH_PERSISTENT_BASH_%s_{nonce}:%s\\n' END \"$?\"")


def clean(data: bytes) -> str:
    text = _CONTROLS.sub(b"", data).replace(b"\r\n", b"\n").replace(b"\r", b"")
    return text.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Captured:
    output: str
    exit_code: int | None  # None: no end marker
    omitted_bytes: int


def between_markers(head: bytes, tail: bytes, dropped: int, nonce: str) -> Captured:
    start = f"__DSH_PERSISTENT_BASH_START_{nonce}__".encode()
    end = re.compile(rb"\r?\n__DSH_PERSISTENT_BASH_END_" + nonce.encode() + rb":(\d+)")
    raw = head + tail if not dropped else None
    if raw is not None:
        at = raw.find(start)
        body = raw[at + len(start):] if at >= 0 else raw
    else:
        at = head.find(start)
        body = (head[at + len(start):] if at >= 0 else head) + b"\n" + tail
    body = body[2:] if body.startswith(b"\r\n") else body.lstrip(b"\n")
    found = end.search(body)
    code = None
    if found is not None:
        code = int(found.group(1))
        body = body[:found.start()]
    return Captured(clean(body), code, dropped)


class PersistentShellTool(Tool):
    def __init__(self, dialect: Dialect) -> None:
        self.dialect: Dialect = dialect
        self.name = dialect
        self._oneshot = ShellTool(PWSH if dialect == "pwsh" else BASH)

    def available(self, ctx: Context) -> bool:
        shells = ctx.get(PersistentShells)
        registry = ctx.get(TerminalRegistry)
        if shells is None or registry is None or not registry.backends():
            return False
        return self.dialect == "bash" or shells.config.pwsh

    def spec(self, ctx: Context) -> ToolSpec:
        title = "PowerShell" if self.dialect == "pwsh" else "bash"
        escalation = self._oneshot.available(ctx)
        base = self._oneshot.spec(ctx) if escalation else None
        props: dict[str, Any] = {
            "command": {"type": "string", "minLength": 1, "description": "The command to run."},
            "description": {"type": "string", "description": "What the command does, in 5-10 words."},
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS,
                           "description": "How long to wait for the command, in milliseconds."},
        }
        if base is not None:
            for key in ("sandbox_permissions", "justification"):
                if key in base.parameters["properties"]:
                    props[key] = base.parameters["properties"][key]
        lines = [
            f"Run a {title} command in your own persistent {title} shell (in the sandbox) and return its "
            "output (stdout and stderr as the terminal shows them, in order).",
            "",
            "- The working directory and exported variables carry over between calls; one command at a "
            "time.",
            "- A non-zero exit ends the result with `[exit code: N]`.",
            f"- `timeout_ms` (default {DEFAULT_TIMEOUT_MS}): a command still running then is stopped, the "
            "shell is closed and the next call starts a fresh one (`[timed out after Nms]`); so does `exit`.",
            "- A program that waits for input returns what it printed so far and is closed with the shell: "
            "use terminal_open for interactive programs.",
        ]
        if "sandbox_permissions" in props:
            lines.append("- With `sandbox_permissions` and a `justification`, the exact command runs once, "
                         "after approval, in a fresh one-shot shell (not this persistent one).")
        return ToolSpec(self.name, "\n".join(lines), object_schema(props, ["command", "description"]))

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        if args.get("sandbox_permissions"):
            return self._oneshot.run(ctx, args, owner)
        shells = ctx.require(PersistentShells)
        shells.claim(owner, self.dialect)
        try:
            return self._run(ctx, shells, args, owner)
        finally:
            shells.release(owner, self.dialect)

    def _run(self, ctx: Context, shells: PersistentShells, args: dict[str, Any], owner: str) -> ToolResult:
        registry = ctx.require(TerminalRegistry)
        timeout_ms: int = args.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        entry = shells.session(owner, self.dialect)
        session: Any = entry.session
        nonce = secrets.token_hex(8)
        budget = shells.config.max_output_chars
        session.start_capture(budget * 4 + 4096)
        prompts = session.prompts
        snap = registry.send(entry.id, owner, TerminalSendRequest(marker_line(args["command"], nonce, self.dialect)),
                             settle_ms=timeout_ms, idle_ms=timeout_ms)
        head, tail, dropped = session.captured()
        got = between_markers(head, tail, dropped, nonce)
        trailer: list[str] = []
        output = got.output
        if got.exit_code is None:
            if snap.wait_reason in ("timeout", "inferred_idle"):
                trailer.append(timeout_marker(timeout_ms))
                trailer.append("[shell closed: the next call starts a fresh one]")
            elif snap.wait_reason == "session_exit":
                status = status_marker(snap.exit_code, snap.signal)
                if status and snap.exit_code != 0:
                    trailer.append(status)
                trailer.append("[shell exited: the next call starts a fresh one]")
            elif session.prompts > prompts:
                trailer.append("[the shell is back at its prompt without finishing the command]")
            else:
                trailer.append("[the command waits for input; it was stopped and the shell closed: use "
                               "terminal_open for interactive programs]")
            if snap.wait_reason != "stdin_read" or session.prompts <= prompts:
                shells.discard(owner, self.dialect)
        elif got.exit_code != 0:
            trailer.append(status_marker(got.exit_code, None) or "")
        changed, removed, too_large = (tuple(map(str, paths)) for paths in shells.judge(entry.id))
        trailer += [sandbox_marker(line) for line in left_behind_notes(changed, removed, too_large)]
        if len(output) > budget or got.omitted_bytes:
            cut = max(0, len(output) - budget)
            output = output[cut:]
            trailer.append(f"[output truncated: {cut} characters and {got.omitted_bytes} bytes omitted]")
        return ToolResult(join_rendered(output, [t for t in trailer if t]))


PERSISTENT_BASH_TOOL = PersistentShellTool("bash")
PERSISTENT_PWSH_TOOL = PersistentShellTool("pwsh")

