"""The six terminal tools: ``terminal_open/send/read/signal/close/list``, over ``ctx.require(TerminalRegistry)``.

Every call names its owner, so an agent only ever sees and drives its own
sessions.  A result is the settled viewport and why the settle ended
(``[wait: stdin_read]`` and the others); a SIGKILL aimed at the shell itself
is refused: ``terminal_close`` ends a session and waits until every process
it started is gone.
"""

from __future__ import annotations

from typing import Any

from dsh.executors.terminal_registry import TerminalRegistry, TerminalSession
from dsh.executors.terminal_seam import (
    ALLOWED_SIGNALS,
    DEFAULT_COLS,
    DEFAULT_IDLE_MS,
    DEFAULT_ROWS,
    DEFAULT_SETTLE_MS,
    MAX_COLS,
    MAX_ROWS,
    MAX_SETTLE_MS,
    TerminalOpenRequest,
    TerminalSendRequest,
    TerminalSnapshot,
)
from dsh.sandbox.context import Context
from dsh.tools.base import Tool, ToolResult
from dsh.tools.spec import ToolSpec, object_schema

_ID = {"type": "string", "minLength": 1, "description": "The terminal id, e.g. term-1."}
_SETTLE = {
    "type": "integer", "minimum": 0, "maximum": MAX_SETTLE_MS,
    "description": f"Wait at most this many milliseconds for the screen to settle (default {DEFAULT_SETTLE_MS}).",
}
_WAIT_WORDS = {
    "stdin_read": "the program waits for input",
    "inferred_idle": "no output for a while; the program may still be working",
    "timeout": "still busy when the wait ran out",
    "session_exit": "the session ended",
}


def render_snapshot(entry: TerminalSession | None, snap: TerminalSnapshot, *, note: str | None = None) -> str:
    lines = [snap.text]
    if snap.output_lost:
        lines.append("[terminal: output came faster than it was read; the screen may be incomplete]")
    if note:
        lines.append(f"[terminal: {note}]")
    where = f"{entry.id} " if entry is not None else ""
    lines.append(f"[terminal {where}wait: {snap.wait_reason} ({_WAIT_WORDS[snap.wait_reason]})]")
    if snap.wait_reason == "session_exit":
        if snap.signal:
            lines.append(f"[killed by signal: {snap.signal}]")
        elif snap.exit_code not in (None, 0):
            lines.append(f"[exit code: {snap.exit_code}]")
    return "\n".join(lines)


def _registry(ctx: Context) -> TerminalRegistry:
    return ctx.require(TerminalRegistry)


class _TerminalTool(Tool):
    def available(self, ctx: Context) -> bool:
        registry = ctx.get(TerminalRegistry)
        return registry is not None and bool(registry.backends())


class TerminalOpenTool(_TerminalTool):
    name = "terminal_open"

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(
            self.name,
            "Open a persistent terminal (an interactive bash on a pseudo-terminal) in the same sandbox "
            "as the shell tools. Its state (directory, variables, running programs) lasts until "
            "terminal_close. Use it for interactive programs (python, a REPL, a debugger); use the "
            "shell tool for one-shot commands. Returns the terminal id and its first screen.",
            object_schema({
                "name": {"type": "string", "minLength": 1, "maxLength": 64,
                         "description": "A name of yours for it (unique among your terminals)."},
                "rows": {"type": "integer", "minimum": 5, "maximum": MAX_ROWS,
                         "description": f"Screen rows (default {DEFAULT_ROWS})."},
                "cols": {"type": "integer", "minimum": 20, "maximum": MAX_COLS,
                         "description": f"Screen columns (default {DEFAULT_COLS})."},
                "workdir": {"type": "string", "minLength": 1,
                            "description": "Directory to start in (default: the workspace)."},
            }, []),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        entry = _registry(ctx).open(owner, TerminalOpenRequest(
            name=args.get("name"), rows=args.get("rows", DEFAULT_ROWS), cols=args.get("cols", DEFAULT_COLS),
            workdir=args.get("workdir"),
        ))
        snap = entry.session.initial
        if snap is None:
            snap = entry.session.read(settle_ms=0, idle_ms=DEFAULT_IDLE_MS)
        return ToolResult(render_snapshot(entry, snap, note=f"opened {entry.id}"))


class TerminalSendTool(_TerminalTool):
    name = "terminal_send"

    def spec(self, ctx: Context) -> ToolSpec:
        signals = ", ".join(ALLOWED_SIGNALS)
        return ToolSpec(
            self.name,
            "Type a line into a terminal and return the screen once it settles: `[... wait: stdin_read]` "
            "means the program waits for input, `inferred_idle` that the output went quiet, `timeout` "
            "that it was still busy, `session_exit` that it ended. `submit` (default true) presses "
            f"Enter after the text. `signal` ({signals}) goes to the foreground program before the text "
            "(SIGINT is Ctrl-C). One send at a time per terminal.",
            object_schema({
                "terminal_id": _ID,
                "text": {"type": "string", "maxLength": 65536, "description": "The text to type."},
                "submit": {"type": "boolean", "description": "Press Enter after the text (default true)."},
                "signal": {"type": "string", "enum": list(ALLOWED_SIGNALS),
                           "description": "A signal for the foreground program, sent first."},
                "settle_ms": _SETTLE,
            }, ["terminal_id", "text"]),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        registry = _registry(ctx)
        entry = registry.get(args["terminal_id"], owner)
        sig = args.get("signal")
        if sig == "SIGKILL" and entry.session.shell_foreground:
            return ToolResult.error(_NO_SHELL_KILL)
        snap = registry.send(entry.id, owner, TerminalSendRequest(args["text"], args.get("submit", True), sig),
                             settle_ms=args.get("settle_ms", DEFAULT_SETTLE_MS), idle_ms=DEFAULT_IDLE_MS)
        return ToolResult(render_snapshot(entry, snap))


class TerminalReadTool(_TerminalTool):
    name = "terminal_read"

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(
            self.name,
            "Read a terminal's screen, after waiting up to `settle_ms` (default 0: as it is now) for it "
            "to settle. `scrollback` adds up to that many lines that scrolled off the top.",
            object_schema({
                "terminal_id": _ID,
                "settle_ms": {**_SETTLE, "description": "Wait at most this many milliseconds (default 0)."},
                "scrollback": {"type": "integer", "minimum": 0, "maximum": 1000,
                               "description": "Lines above the screen to include (default 0)."},
            }, ["terminal_id"]),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        registry = _registry(ctx)
        entry = registry.get(args["terminal_id"], owner)
        snap = registry.read(entry.id, owner, settle_ms=args.get("settle_ms", 0), idle_ms=DEFAULT_IDLE_MS)
        text = render_snapshot(entry, snap)
        above = entry.session.scrollback(args.get("scrollback", 0))
        if above:
            text = "\n".join(above) + "\n[terminal: screen starts here]\n" + text
        return ToolResult(text)


_NO_SHELL_KILL = ("SIGKILL would kill the terminal's shell itself; use terminal_close to end the session "
                  "(it kills everything the session started and waits for it), or SIGINT/SIGTERM for a "
                  "program running in it")


class TerminalSignalTool(_TerminalTool):
    name = "terminal_signal"

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(
            self.name,
            f"Send a signal ({', '.join(ALLOWED_SIGNALS)}) to the program in the foreground of a terminal "
            "and return the screen once it settles. SIGKILL is refused while the shell itself is in the "
            "foreground: end a session with terminal_close.",
            object_schema({"terminal_id": _ID,
                           "signal": {"type": "string", "enum": list(ALLOWED_SIGNALS),
                                      "description": "The signal to send."},
                           "settle_ms": _SETTLE}, ["terminal_id", "signal"]),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        registry = _registry(ctx)
        entry = registry.get(args["terminal_id"], owner)
        if args["signal"] == "SIGKILL" and entry.session.shell_foreground:
            return ToolResult.error(_NO_SHELL_KILL)
        registry.signal(entry.id, owner, args["signal"])
        snap = registry.read(entry.id, owner, settle_ms=args.get("settle_ms", DEFAULT_SETTLE_MS),
                             idle_ms=DEFAULT_IDLE_MS)
        return ToolResult(render_snapshot(entry, snap, note=f"sent {args['signal']}"))


class TerminalCloseTool(_TerminalTool):
    name = "terminal_close"

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(
            self.name,
            "Close a terminal: its shell and every process it started are killed, and the call returns "
            "once they are all gone.",
            object_schema({"terminal_id": _ID}, ["terminal_id"]),
        )

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        gone = _registry(ctx).close_session(args["terminal_id"], owner)
        if gone:
            return ToolResult(f"[terminal {args['terminal_id']} closed: every process it started is gone]")
        return ToolResult(f"[terminal {args['terminal_id']} closed, but some of its processes had not exited "
                          "yet; they are being killed]")


class TerminalListTool(_TerminalTool):
    name = "terminal_list"

    def spec(self, ctx: Context) -> ToolSpec:
        return ToolSpec(self.name, "List your open terminals: id, name, size and whether each is still running.",
                        object_schema({}, []))

    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        entries = _registry(ctx).list(owner)
        if not entries:
            return ToolResult("[no terminals open]")
        rows = []
        for e in entries:
            state = "running" if e.session.alive else "ended"
            name = f" name={e.name}" if e.name else ""
            rows.append(f"{e.id}{name} {e.request.rows}x{e.request.cols} {state}")
        return ToolResult("\n".join(rows))


TERMINAL_TOOLS: tuple[Tool, ...] = (
    TerminalOpenTool(), TerminalSendTool(), TerminalReadTool(), TerminalSignalTool(), TerminalCloseTool(),
    TerminalListTool(),
)
