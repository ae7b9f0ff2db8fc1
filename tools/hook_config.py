"""Hook configurations of agent harnesses, read for ``dsh-sandbox hook``.

Two formats, one shape: Claude Code's ``settings.json`` and Codex's
``hooks.json`` are ``{"hooks": {EVENT: [{"matcher": M, "hooks": [HANDLER]}]}}``
with ``HANDLER = {"type": "command", "command": SHELL_STRING, "timeout": S}``;
Codex's ``config.toml`` holds the same tree as a ``[hooks]`` table
(``[[hooks.PreToolUse]]``, ``[[hooks.PreToolUse.hooks]]``).  What differs is
the event list, which events filter by a matcher and on which payload field,
and how a matcher is read.

Pure: text in, values out.  Every shape error is a ``ConfigError`` naming the
field (``hooks.PreToolUse[0].hooks[1].timeout``) and the fix, so the command
never guesses at a guard hook it cannot read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.input_files import text_problem
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.numeric import NumberError, seconds

HookFormat = Literal["claude", "codex"]
FORMATS: tuple[HookFormat, ...] = ("claude", "codex")

#: Event -> the payload field its matcher is compared with (None: the event
#: has no matcher; a matcher written there is ignored, as both harnesses do).
CLAUDE_EVENTS: dict[str, str | None] = {
    "PreToolUse": "tool_name",
    "PermissionRequest": "tool_name",
    "PostToolUse": "tool_name",
    "PostToolUseFailure": "tool_name",
    "UserPromptSubmit": None,
    "Notification": "notification_type",
    "Stop": None,
    "SubagentStart": "agent_type",
    "SubagentStop": "agent_type",
    "PreCompact": "trigger",
    "PostCompact": "trigger",
    "SessionStart": "source",
    "SessionEnd": "reason",
}
CODEX_EVENTS: dict[str, str | None] = {
    "PreToolUse": "tool_name",
    "PermissionRequest": "tool_name",
    "PostToolUse": "tool_name",
    "SessionStart": "source",
    "PreCompact": None,
    "PostCompact": None,
    "UserPromptSubmit": None,
    "Stop": None,
}
EVENTS: dict[HookFormat, dict[str, str | None]] = {"claude": CLAUDE_EVENTS, "codex": CODEX_EVENTS}

#: Both harnesses' default for a command hook without ``timeout``.
DEFAULT_TIMEOUT_S = 600.0
#: A hook's ``timeout`` may not exceed a day (the CLI's own cap on a run).
MAX_TIMEOUT_S = 24 * 3600.0
#: A command is a shell string, not a script file's content.
MAX_COMMAND_CHARS = 64 * 1024
#: Handler fields that change which calls a hook sees or how it runs, which
#: this bridge does not implement: refused rather than silently widened.
_UNSUPPORTED_FIELDS = {"if": "a permission-rule filter", "shell": "a shell other than bash"}

# An exact name (or a list of them) versus a regular expression: Claude Code
# reads letters, digits, "_", "-", spaces, "," and "|" as exact names; Codex
# only letters, digits, "_" and "|".
_EXACT = {"claude": LazyPattern(r"[A-Za-z0-9_\- ,|]+"), "codex": LazyPattern(r"[A-Za-z0-9_|]+")}
_SEPARATORS = {"claude": LazyPattern(r"[|,]"), "codex": LazyPattern(r"\|")}


@dataclass(frozen=True)
class Handler:
    """One hook handler; ``kind`` other than ``command`` is reported, never run."""

    label: str  # where it is written: hooks.PreToolUse[0].hooks[1]
    kind: str
    command: str
    timeout_s: float


@dataclass(frozen=True)
class Group:
    label: str
    matcher: str | None
    handlers: tuple[Handler, ...]


@dataclass(frozen=True)
class HookConfig:
    format: HookFormat
    events: dict[str, tuple[Group, ...]]
    disabled: bool = False  # Claude Code's disableAllHooks

    def select(self, event: str, payload: dict[str, Any]) -> tuple[Handler, ...]:
        """The handlers that run for ``event`` with this payload, in file order."""
        if self.disabled:
            return ()
        field = EVENTS[self.format][event]
        value = payload.get(field) if field is not None else None
        chosen: list[Handler] = []
        for group in self.events.get(event, ()):
            if field is None or matches(self.format, group.matcher, value if isinstance(value, str) else None):
                chosen.extend(group.handlers)
        return tuple(chosen)


def event_problem(fmt: HookFormat, event: str) -> str | None:
    """Why ``event`` is not an event of ``fmt``, or None."""
    if event in EVENTS[fmt]:
        return None
    return f"{event!r} is not a {_NAMES[fmt]} hook event this bridge runs; use one of {', '.join(EVENTS[fmt])}"


_NAMES = {"claude": "Claude Code", "codex": "Codex"}


def matches(fmt: HookFormat, matcher: str | None, value: str | None) -> bool:
    """Whether a group with ``matcher`` runs for the payload value ``value``."""
    if matcher is None or matcher in ("", "*"):
        return True
    if value is None:
        return False
    if _EXACT[fmt].fullmatch(matcher):
        return value in {name.strip() for name in _SEPARATORS[fmt].split(matcher)}
    return re.search(matcher, value) is not None


def parse_json_settings(text: str, shown: str, fmt: HookFormat) -> HookConfig:
    """A Claude Code ``settings.json`` or a Codex ``hooks.json``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"settings {shown}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); "
                          "fix the file (a settings.json or hooks.json)") from None
    except RecursionError:
        raise ConfigError(f"settings {shown}: nested too deeply to be a hooks configuration; "
                          "name the right file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"settings {shown}: the top level is {_kind(data)}, not an object; write "
                          '{"hooks": {"PreToolUse": [...]}}')
    disabled = data.get("disableAllHooks", False)
    if not isinstance(disabled, bool):
        raise ConfigError(f"settings {shown}: disableAllHooks must be true or false, got {_kind(disabled)}")
    return _parse_tree(data.get("hooks"), shown, fmt, disabled=disabled)


def parse_toml_settings(text: str, shown: str) -> HookConfig:
    """A Codex ``config.toml``: its ``[hooks]`` table (``state`` is Codex's own record)."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"settings {shown}: not TOML ({exc}); fix the file") from None
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        hooks = {key: value for key, value in hooks.items() if key != "state"}
    return _parse_tree(hooks, shown, "codex", disabled=False)


def _parse_tree(hooks: object, shown: str, fmt: HookFormat, *, disabled: bool) -> HookConfig:
    if hooks is None:
        return HookConfig(fmt, {}, disabled)
    if not isinstance(hooks, dict):
        raise ConfigError(f"settings {shown}: hooks is {_kind(hooks)}, not an object of events; write "
                          '"hooks": {"PreToolUse": [...]}')
    events: dict[str, tuple[Group, ...]] = {}
    for event, groups in hooks.items():
        problem = event_problem(fmt, event)
        if problem is not None:
            raise ConfigError(f"settings {shown}: hooks.{event}: {problem}")
        label = f"hooks.{event}"
        if not isinstance(groups, list):
            raise ConfigError(f"settings {shown}: {label} is {_kind(groups)}, not a list of matcher groups; "
                              'write [{"matcher": "Bash", "hooks": [...]}]')
        events[event] = tuple(
            _group(group, f"{label}[{i}]", shown, fmt, EVENTS[fmt][event] is not None) for i, group in enumerate(groups)
        )
    return HookConfig(fmt, events, disabled)


def _group(group: object, label: str, shown: str, fmt: HookFormat, filters: bool) -> Group:
    if not isinstance(group, dict):
        raise ConfigError(f"settings {shown}: {label} is {_kind(group)}, not an object; "
                          'write {"matcher": "Bash", "hooks": [...]}')
    matcher = group.get("matcher")
    if matcher is not None and not isinstance(matcher, str):
        raise ConfigError(f"settings {shown}: {label}.matcher is {_kind(matcher)}, not a string; "
                          'write a tool name, a regular expression, or "*"')
    if matcher is not None and filters and not _EXACT[fmt].fullmatch(matcher) and matcher not in ("", "*"):
        try:
            re.compile(matcher)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ConfigError(f"settings {shown}: {label}.matcher {matcher!r} is not a valid regular "
                              f"expression ({exc}); fix it or write exact names like Edit|Write") from None
    handlers = group.get("hooks", [])
    if not isinstance(handlers, list):
        raise ConfigError(f"settings {shown}: {label}.hooks is {_kind(handlers)}, not a list of handlers; "
                          'write [{"type": "command", "command": "..."}]')
    return Group(label, matcher if filters else None,
                 tuple(_handler(h, f"{label}.hooks[{i}]", shown) for i, h in enumerate(handlers)))


def _handler(handler: object, label: str, shown: str) -> Handler:
    if not isinstance(handler, dict):
        raise ConfigError(f"settings {shown}: {label} is {_kind(handler)}, not an object; "
                          'write {"type": "command", "command": "..."}')
    kind = handler.get("type")
    if not isinstance(kind, str) or not kind:
        raise ConfigError(f"settings {shown}: {label}.type is missing or not a string; write \"type\": \"command\"")
    for key, what in _UNSUPPORTED_FIELDS.items():
        if key in handler and not (key == "shell" and handler[key] == "bash"):
            raise ConfigError(f"settings {shown}: {label}.{key}: {what} is not supported by dsh-sandbox hook "
                              "(its selection or shell would differ from the harness's); drop the field "
                              "and do the check in the command")
    timeout = DEFAULT_TIMEOUT_S
    if handler.get("timeout") is not None:
        try:
            timeout = seconds(f"{label}.timeout", handler["timeout"], high=MAX_TIMEOUT_S)
        except NumberError as exc:
            raise ConfigError(f"settings {shown}: {exc}") from None
    if kind != "command":
        return Handler(label, kind, "", timeout)
    command = handler.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"settings {shown}: {label}.command is missing, empty or not a string; "
                          "write the shell command the hook runs")
    problem = text_problem(command, limit=MAX_COMMAND_CHARS)
    if problem is not None:
        raise ConfigError(f"settings {shown}: {label}.command {problem}; fix the command")
    return Handler(label, kind, command, timeout)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)
