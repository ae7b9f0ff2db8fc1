"""``approval-rules``: escalations approved by a TOML rules file.

    [[rule]]
    mode = "danger-full-access"      # the target mode the rule approves
    workdir = "~/src/app"            # where: a directory, a glob ("~/src/*"),
                                     # or a tree ("~/src/**": it and below)
    command = "make install"         # this exact command string, or
    # prefix = "git push"            # any simple command whose argv starts so
    decision = "once"                # or "session" (default "once")

``workdir`` is required: the same command means something else in another
directory (``git status`` runs ``core.fsmonitor`` from that repository's
``.git/config``, which a sandboxed command may have written).  It is matched
against the request's canonical working directory; ``*`` does not cross a
``/``.  Rules match in order.  A ``prefix`` rule (a shlex-split string or a list of
words) matches only a *simple* command: one with no shell operators,
substitutions, redirections or escapes (``;&|<>(){}$`` backquote, backslash,
newline), because ``git push && rm -rf ~`` must never ride on ``git push``.
Anything no rule approves goes to ``fallback``: ``deny`` (default) or
``prompt``.  Any problem in the file is a ``ConfigError`` at load time naming
the line and key: a broken rules file never approves anything.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal

from dsh.sandbox.approval import (
    Approval,
    ApprovalConfig,
    EscalationDecision,
    EscalationRequest,
    TerminalPrompter,
)
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode

_RULE_KEYS = ("mode", "workdir", "command", "prefix", "decision")
_NOT_SIMPLE = re.compile(r"[;&|<>(){}$`\\\n\r]")


@dataclass(frozen=True)
class Rule:
    mode: SandboxMode
    command: str | None
    prefix: tuple[str, ...] | None
    decision: Literal["once", "session"]
    line: int
    workdir: str = ""  # canonical directory, glob, or tree ending in "/**"

    def matches(self, request: EscalationRequest) -> bool:
        if request.requested_mode is not self.mode:
            return False
        if not workdir_matches(self.workdir, request.workdir):
            return False
        if self.command is not None:
            return request.command == self.command
        assert self.prefix is not None
        argv = simple_argv(request.command)
        return argv is not None and tuple(argv[: len(self.prefix)]) == self.prefix


def workdir_matches(pattern: str, workdir: str) -> bool:
    """Does the canonical ``workdir`` match ``pattern`` (a path, a glob whose
    ``*`` stays inside one component, or ``DIR/**`` for DIR and below)?"""
    real = PurePosixPath(os.path.realpath(workdir))
    if pattern.endswith("/**"):
        tree = PurePosixPath(pattern[:-3] or "/")
        return real == tree or tree in real.parents
    want = PurePosixPath(pattern).parts
    have = real.parts
    return len(want) == len(have) and all(fnmatch.fnmatchcase(h, w) for h, w in zip(have, want, strict=True))


def _workdir_pattern(value: str) -> str:
    """``~`` expanded and the fixed part resolved (the glob part kept)."""
    expanded = os.path.expanduser(value)
    if not os.path.isabs(expanded):
        raise ValueError("must be an absolute path (or start with ~)")
    parts = PurePosixPath(expanded).parts
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    head = os.path.realpath(os.path.join(*parts[:fixed])) if fixed else "/"
    return str(PurePosixPath(head, *parts[fixed:]))


def simple_argv(command: str) -> list[str] | None:
    """The argv of a simple command, or None if the shell would do more than run it."""
    if _NOT_SIMPLE.search(command):
        return None
    try:
        return shlex.split(command)
    except ValueError:
        return None


@dataclass(frozen=True)
class RulesConfig(ApprovalConfig):
    path: str | None = None
    fallback: Literal["deny", "prompt"] = "deny"
    timeout_s: float = 60.0  # for the prompt fallback
    tty: str = "/dev/tty"


def _line_of(lines: list[str], pattern: str, start: int = 0) -> int:
    rx = re.compile(pattern)
    for i in range(start, len(lines)):
        if rx.match(lines[i]):
            return i + 1
    return start + 1


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    """Parse and check a rules file; every mistake is a ConfigError with a line."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(f"approval-rules: cannot read rules file {str(p)!r}: {why}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"approval-rules: {p}: invalid TOML: {exc}") from None
    lines = text.splitlines()
    extra = sorted(set(data) - {"rule"})
    if extra:
        line = _line_of(lines, rf"\s*\[*\s*{re.escape(extra[0])}\b")
        raise ConfigError(
            f"approval-rules: {p}:{line}: unknown key {extra[0]!r}; the file holds [[rule]] tables only"
        )
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list):
        raise ConfigError(f"approval-rules: {p}: 'rule' must be an array of tables: write [[rule]]")
    headers = [i + 1 for i, text in enumerate(lines) if re.match(r"\s*\[\[\s*rule\s*\]\]", text)]
    return tuple(
        _parse_rule(raw, p, index, lines, headers[index - 1] if index <= len(headers) else 1)
        for index, raw in enumerate(raw_rules, 1)
    )


def _parse_rule(raw: Any, p: Path, index: int, lines: list[str], header: int) -> Rule:
    def fail(key: str | None, problem: str) -> ConfigError:
        line = _line_of(lines, rf"\s*{re.escape(key)}\s*=", header) if key else header
        where = f"rule #{index}" + (f", key {key!r}" if key else "")
        return ConfigError(f"approval-rules: {p}:{line}: {where}: {problem}")

    if not isinstance(raw, dict):
        raise fail(None, "must be a table")
    for key in raw:
        if key not in _RULE_KEYS:
            raise fail(key, f"unknown key; allowed: {', '.join(_RULE_KEYS)}")
    if "mode" not in raw:
        raise fail(None, "'mode' is required (the target mode this rule approves)")
    if not isinstance(raw["mode"], str):
        raise fail("mode", "must be a string")
    try:
        mode = SandboxMode.parse(raw["mode"])
    except ConfigError as exc:
        raise fail("mode", str(exc)) from None
    if ("command" in raw) == ("prefix" in raw):
        raise fail(None, "give exactly one of 'command' (exact) or 'prefix' (argv prefix)")
    command: str | None = None
    prefix: tuple[str, ...] | None = None
    if "command" in raw:
        if not isinstance(raw["command"], str) or not raw["command"]:
            raise fail("command", "must be a non-empty string (the exact command)")
        command = raw["command"]
    else:
        value = raw["prefix"]
        if isinstance(value, str):
            try:
                words = shlex.split(value)
            except ValueError as exc:
                raise fail("prefix", f"cannot be split like a shell command: {exc}") from None
        elif isinstance(value, list) and all(isinstance(w, str) for w in value):
            words = list(value)
        else:
            raise fail("prefix", "must be a string or a list of strings")
        if not words or any(not w for w in words):
            raise fail("prefix", "must name at least the program, with no empty words")
        prefix = tuple(words)
    decision = raw.get("decision", "once")
    if decision not in ("once", "session"):
        raise fail("decision", f"must be 'once' or 'session', got {decision!r}")
    if "workdir" not in raw:
        raise fail(
            None,
            "'workdir' is required: the directory the rule applies to, e.g. "
            'workdir = "~/src/app", a glob "~/src/*" or a tree "~/src/**"',
        )
    if not isinstance(raw["workdir"], str) or not raw["workdir"].strip():
        raise fail("workdir", "must be a non-empty string (a directory, glob or DIR/**)")
    try:
        workdir = _workdir_pattern(raw["workdir"])
    except ValueError as exc:
        raise fail("workdir", f"{exc}, got {raw['workdir']!r}") from None
    return Rule(mode, command, prefix, decision, header, workdir)


class RulesApproval(Approval):
    """``approval-rules``: exact-command and argv-prefix rules per target mode."""

    plugin_name: ClassVar[str] = "approval-rules"

    Config: ClassVar[type[Any]] = RulesConfig
    config: RulesConfig

    def __init__(self, ctx: Context | None = None, config: RulesConfig | None = None) -> None:
        super().__init__(ctx, config)
        if not self.config.path:
            raise ConfigError("approval-rules: config 'path' is required: the TOML rules file")
        self.rules = load_rules(self.config.path)
        self.prompter = (
            TerminalPrompter(self.config.timeout_s, self.config.tty)
            if self.config.fallback == "prompt"
            else None
        )

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        for rule in self.rules:
            if rule.matches(request):
                why = f"rule at {self.config.path}:{rule.line}"
                if rule.decision == "session":
                    return EscalationDecision.approve_session(why)
                return EscalationDecision.approve_once(why)
        if self.prompter is not None:
            return self.prompter.ask(request, self.provider_name)
        return EscalationDecision.deny(
            f"no rule approves this exact command in {request.workdir} for "
            f"{request.requested_mode.value} mode"
        )
