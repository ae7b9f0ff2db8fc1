"""``approval-rules``: escalations approved by a TOML rules file.

    [[rule]]
    mode = "danger-full-access"      # the target mode the rule approves
    workdir = "~/src/app"            # where: a directory, a glob ("~/src/*"),
                                     # or a tree ("~/src/**": it and below)
    command = "make install"         # this exact command string, or
    # argv = ["make", "install"]     # this exact argv, or
    # prefix = "git push"            # a simple command starting so, whose
    # args = ["origin", "main"]      # further words are all listed here
    decision = "once"                # or "session" (default "once")

``workdir`` is required: the same command means something else in another
directory (``git status`` runs ``core.fsmonitor`` from that repository's
``.git/config``, which a sandboxed command may have written).  It is matched
against the request's canonical working directory; ``*`` does not cross a
``/``.  Rules match in order.  An ``argv`` or ``prefix`` rule matches only a
*simple* command (see ``command_words``), because ``git push && rm -rf ~``
must never ride on ``git push``; a ``prefix`` rule's further words must each
be listed in ``args`` and never be one of ``command_words.DANGEROUS``
(``git push --receive-pack=./rp.sh`` runs what the denied run wrote).

No rule approves a re-run after a denial whose run changed anything under the
writable roots (or when that is unknown): the rule was written for the
command, not for what the denied run made of its inputs.  Anything no rule
approves goes to ``fallback``: ``deny`` (default) or ``prompt``.  Any problem
in the file is a ``ConfigError`` at load time naming the line and key: a
broken rules file never approves anything.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal

from dsh.sandbox.approval import Approval, ApprovalConfig, EscalationDecision, EscalationRequest
from dsh.sandbox.command_words import (
    KNOWN_TOOLS,
    dangerous_word,
    is_pattern,
    simple_argv,
    tool_of,
    word_allowed,
)
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.terminal_prompt import TerminalPrompter
from dsh.sandbox.terminal_text import printable

_RULE_KEYS = ("mode", "workdir", "command", "argv", "prefix", "args", "decision")


@dataclass(frozen=True)
class Rule:
    mode: SandboxMode
    command: str | None
    prefix: tuple[str, ...] | None
    decision: Literal["once", "session"]
    line: int
    workdir: str = ""  # canonical directory, glob, or tree ending in "/**"
    argv: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()  # with ``prefix``: the further words allowed (exact or patterns)

    def matches(self, request: EscalationRequest) -> bool:
        if request.requested_mode is not self.mode:
            return False
        if not workdir_matches(self.workdir, request.workdir):
            return False
        if self.command is not None:
            return request.command == self.command
        argv = request_argv(request)
        if argv is None:
            return False
        if self.argv is not None:
            return argv == self.argv
        assert self.prefix is not None
        n = len(self.prefix)
        return argv[:n] == self.prefix and all(word_allowed(argv, w, self.args) for w in argv[n:])


def request_argv(request: EscalationRequest) -> tuple[str, ...] | None:
    """What will run, as words: the exact argv of a run without a shell, or
    what bash makes of a simple command; None for anything else (a compound
    bash command, a PowerShell command, bytes that are not text)."""
    if request.argv is not None:
        return request.argv
    if request.shell != "bash":
        return None
    argv = simple_argv(request.command)
    return None if argv is None else tuple(argv)


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


def read_rules_file(path: str | Path) -> tuple[str, str]:
    """The text of a rules file and the real path of the file read (one
    descriptor: a regular file, bounded, never a FIFO to hang on)."""
    from dsh.sandbox.input_files import InputFileError, read_input_file

    p = Path(path).expanduser()
    try:
        read = read_input_file(str(p))
    except InputFileError as exc:
        raise ConfigError(f"approval-rules: cannot read rules file {str(p)!r}: {exc.problem}; {exc.fix}") from None
    return read.text, read.real


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    """Read, parse and check a rules file; every mistake is a ConfigError with a line."""
    return parse_rules(read_rules_file(path)[0], path)


def parse_rules(text: str, path: str | Path) -> tuple[Rule, ...]:
    """Parse and check the text of the rules file ``path``."""
    p = Path(path).expanduser()
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
    given = [key for key in ("command", "argv", "prefix") if key in raw]
    if len(given) != 1:
        raise fail(
            None,
            "give exactly one of 'command' (the exact command string), 'argv' (the exact "
            "words) or 'prefix' (first words) with 'args' (the further words allowed)",
        )
    command: str | None = None
    argv: tuple[str, ...] | None = None
    prefix: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    if "args" in raw and "prefix" not in raw:
        raise fail("args", "goes with 'prefix' only: it lists the words allowed after the prefix")
    if "command" in raw:
        if not isinstance(raw["command"], str) or not raw["command"]:
            raise fail("command", "must be a non-empty string (the exact command)")
        command = raw["command"]
    elif "argv" in raw:
        argv = _words(raw["argv"], "argv", fail)
    else:
        prefix = _words(raw["prefix"], "prefix", fail)
        if "args" not in raw:
            raise fail(
                "prefix",
                "needs 'args': the words allowed after the prefix (args = [] for none), e.g. "
                'prefix = "git push" with args = ["origin", "main"]; a prefix alone used to approve '
                "any further words, options that run a program among them (git push --receive-pack=...)",
            )
        args = _args(raw["args"], prefix, fail)
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
    return Rule(mode, command, prefix, decision, header, workdir, argv, args)


def _words(value: Any, key: str, fail: Callable[[str | None, str], ConfigError]) -> tuple[str, ...]:
    """A string split like a shell command line, or a list of strings."""
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise fail(key, f"cannot be split like a shell command: {exc}") from None
    elif isinstance(value, list) and all(isinstance(w, str) for w in value):
        words = list(value)
    else:
        raise fail(key, "must be a string or a list of strings")
    # An exact argv may hold an empty word (touch ''); a prefix has no use for one.
    if not words or not words[0] or any("\0" in w or (not w and key == "prefix") for w in words):
        raise fail(key, "must name at least the program, with no empty words and no NUL")
    if "=" in words[0]:
        raise fail(key, f"must start with the program, not an assignment ({words[0]!r})")
    return tuple(words)


def _args(value: Any, prefix: tuple[str, ...], fail: Callable[[str | None, str], ConfigError]) -> tuple[str, ...]:
    """The words allowed after ``prefix``: each exact, or (for a tool whose
    dangerous words are known) a pattern; none that the tool's table refuses."""
    if not isinstance(value, list) or not all(isinstance(w, str) and w and "\0" not in w for w in value):
        raise fail("args", "must be a list of non-empty strings (args = [] allows no further words)")
    tool = tool_of(prefix)
    # Judged beside every other listed word: "clone" listed makes "-u" --upload-pack.
    literal = tuple(w for w in value if not is_pattern(w))
    for word in prefix[1:]:  # the prefix's own words: "git submodule foreach" runs its argument
        danger = dangerous_word((*prefix, *literal), word)
        if danger is not None:
            raise fail(
                "prefix",
                f"{word!r} is never approved by a prefix rule: {danger.tool} {danger.word}: {danger.why}; "
                "approve the exact command with 'argv' if you mean it",
            )
    for word in value:
        if is_pattern(word):
            if tool not in KNOWN_TOOLS:
                raise fail(
                    "args",
                    f"{word!r}: patterns are allowed only for tools whose dangerous words are known "
                    f"({', '.join(sorted(KNOWN_TOOLS))}); list each word {tool} may get",
                )
            if word.startswith("-"):
                raise fail("args", f"{word!r}: a pattern never matches an option; list options as they are")
            continue
        danger = dangerous_word((*prefix, *literal), word)
        if danger is not None:
            raise fail(
                "args",
                f"{word!r} is never approved by a prefix rule: {danger.tool} {danger.word}: {danger.why}; "
                "approve the exact command with 'argv' if you mean it",
            )
    return tuple(value)


class RulesApproval(Approval):
    """``approval-rules``: exact-command and argv-prefix rules per target mode."""

    plugin_name: ClassVar[str] = "approval-rules"

    Config: ClassVar[type[Any]] = RulesConfig
    config: RulesConfig

    def __init__(self, ctx: Context, config: RulesConfig | None = None) -> None:
        super().__init__(ctx, config)
        if not self.config.path:
            raise ConfigError("approval-rules: config 'path' is required: the TOML rules file")
        text, real = read_rules_file(self.config.path)
        #: The real path of the file the rules were read from (judged, not the name).
        self.rules_real_path = real
        self.rules = parse_rules(text, self.config.path)
        self.prompter = (
            TerminalPrompter(self.config.timeout_s, self.config.tty)
            if self.config.fallback == "prompt"
            else None
        )

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        changes = request.changes
        if changes is not None and not changes.clean:
            # A rule approves a command; after a denied run, what that command
            # reads (its Makefile, scripts, config) may be the denied run's work.
            if changes.total:
                named = ", ".join(f"{kind} {printable(path)}" for kind, path in changes.lines(3))
                more = f" and {changes.total - 3} more" if changes.total > 3 else ""
                why = f"the denied run changed {changes.total} file(s) under the writable roots ({named}{more})"
            else:
                gap = printable(changes.incomplete[0])
                why = f"what the denied run changed under the writable roots is unknown ({gap})"
            if self.prompter is not None:
                return self.prompter.ask(request, self.provider_name)
            return EscalationDecision.deny(
                f"{why}: a rules file never approves a re-run whose inputs the denied run may have "
                "changed; review them and run again, or use --approval prompt to see the list"
            )
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
