"""Reading Claude Code and Codex hook configurations, choosing handlers, combining answers.

The settings below are the shapes the harnesses document: Claude Code's
``settings.json`` (the hooks reference and guide: a ``Bash`` matcher logging
``jq -r '.tool_input.command'``, a ``Write|Edit`` matcher running a script under
``$CLAUDE_PROJECT_DIR``, events without matchers) and Codex's ``hooks.json`` /
``config.toml`` ``[hooks]`` (codex-rs ``HooksFile``/``HookEventsToml``:
``[[hooks.PreToolUse]]`` groups with ``[[hooks.PreToolUse.hooks]]`` handlers).
"""

from __future__ import annotations

import json

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.tools.hook_config import DEFAULT_TIMEOUT_S, matches, parse_json_settings, parse_toml_settings
from dsh.tools.hook_decision import HookOutcome, combine, render

CLAUDE_SETTINGS = json.dumps({
    "permissions": {"allow": ["Bash(npm run lint)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [
                {"type": "command", "command": "jq -r '.tool_input.command' >> ~/.claude/bash-command-log.txt"}]},
            {"matcher": "Write|Edit", "hooks": [
                {"type": "command", "command": '"$CLAUDE_PROJECT_DIR"/.claude/hooks/check-style.sh', "timeout": 30}]},
            {"matcher": "mcp__memory__.*", "hooks": [{"type": "command", "command": "echo mcp"}]},
        ],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo context"}]}],
        "Stop": [{"matcher": "ignored-here", "hooks": [{"type": "command", "command": "echo stop"}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}],
    },
})

CODEX_TOML = """
model = "o4-mini"

[[hooks.PreToolUse]]
matcher = "^Bash$"

[[hooks.PreToolUse.hooks]]
type = "command"
command = "python3 ~/.codex/hooks/check.py"
timeout = 30
statusMessage = "checking"

[[hooks.Stop]]
[[hooks.Stop.hooks]]
type = "command"
command = "echo done"

[hooks.state."/home/u/.codex/config.toml:pre_tool_use:0:0"]
enabled = true
"""


def labels(handlers: tuple[object, ...]) -> list[str]:
    return [h.label for h in handlers]  # type: ignore[attr-defined]


def test_the_documented_claude_code_shape_is_read() -> None:
    config = parse_json_settings(CLAUDE_SETTINGS, "settings.json", "claude")
    bash = config.select("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}})
    assert labels(bash) == ["hooks.PreToolUse[0].hooks[0]"]
    assert bash[0].command == "jq -r '.tool_input.command' >> ~/.claude/bash-command-log.txt"
    assert bash[0].timeout_s == DEFAULT_TIMEOUT_S
    edit = config.select("PreToolUse", {"tool_name": "Edit"})
    assert labels(edit) == ["hooks.PreToolUse[1].hooks[0]"] and edit[0].timeout_s == 30
    assert labels(config.select("PreToolUse", {"tool_name": "mcp__memory__create_entities"})) == [
        "hooks.PreToolUse[2].hooks[0]"]
    assert config.select("PreToolUse", {"tool_name": "Read"}) == ()
    # Events without a matcher ignore one; SessionStart matches its source.
    assert len(config.select("Stop", {})) == 1 and len(config.select("UserPromptSubmit", {"prompt": "x"})) == 1
    assert len(config.select("SessionStart", {"source": "startup"})) == 1
    assert config.select("SessionStart", {"source": "resume"}) == ()
    assert config.select("PostToolUse", {"tool_name": "Bash"}) == ()


def test_disable_all_hooks_runs_none() -> None:
    data = json.loads(CLAUDE_SETTINGS) | {"disableAllHooks": True}
    assert parse_json_settings(json.dumps(data), "s.json", "claude").select("Stop", {}) == ()


def test_the_codex_config_toml_shape_is_read() -> None:
    config = parse_toml_settings(CODEX_TOML, "config.toml")
    chosen = config.select("PreToolUse", {"tool_name": "Bash"})
    assert labels(chosen) == ["hooks.PreToolUse[0].hooks[0]"] and chosen[0].timeout_s == 30
    assert config.select("PreToolUse", {"tool_name": "BashOutput"}) == ()
    assert len(config.select("Stop", {})) == 1


@pytest.mark.parametrize(("fmt", "matcher", "value", "expected"), [
    ("claude", None, "Bash", True), ("claude", "", "Bash", True), ("claude", "*", "Bash", True),
    ("claude", "Bash", "Bash", True), ("claude", "Bash", "BashOutput", False),
    ("claude", "Edit|Write", "Write", True), ("claude", "Edit, Write", "Write", True),
    ("claude", "Edit|Write", "Read", False), ("claude", "Notebook.*", "NotebookEdit", True),
    ("claude", "^Bash", "BashOutput", True), ("claude", "^Bash$", "BashOutput", False),
    ("claude", "mcp__memory", "mcp__memory__create_entities", False),
    ("claude", "Bash", None, False),
    ("codex", "Edit|Write", "Edit", True), ("codex", "Bash", "BashOutput", False),
    ("codex", "^Bash", "BashOutput", True), ("codex", "*", "x", True),
])
def test_matchers_follow_each_harness(fmt: str, matcher: str | None, value: str | None, expected: bool) -> None:
    assert matches(fmt, matcher, value) is expected  # type: ignore[arg-type]


BAD = {
    "not json": ("{", "not JSON"),
    "top level list": ("[]", "top level"),
    "hooks not object": ('{"hooks": []}', "hooks is a list"),
    "unknown event": ('{"hooks": {"PreToolUsed": []}}', "hooks.PreToolUsed"),
    "groups not list": ('{"hooks": {"Stop": {}}}', "hooks.Stop is an object"),
    "group not object": ('{"hooks": {"Stop": [1]}}', "hooks.Stop[0] is a number"),
    "matcher not string": ('{"hooks": {"PreToolUse": [{"matcher": 3, "hooks": []}]}}', "hooks.PreToolUse[0].matcher"),
    "bad regex": ('{"hooks": {"PreToolUse": [{"matcher": "Bash(", "hooks": []}]}}', "not a valid regular expression"),
    "handler not object": ('{"hooks": {"Stop": [{"hooks": ["echo"]}]}}', "hooks.Stop[0].hooks[0] is a string"),
    "no type": ('{"hooks": {"Stop": [{"hooks": [{"command": "x"}]}]}}', "hooks.Stop[0].hooks[0].type"),
    "no command": ('{"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}', "hooks.Stop[0].hooks[0].command"),
    "nul in command": ('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "a\\u0000b"}]}]}}', "NUL"),
    "bad timeout": ('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}',
                    "hooks.Stop[0].hooks[0].timeout"),
    "timeout string": ('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": "9"}]}]}}',
                       "hooks.Stop[0].hooks[0].timeout"),
    "if filter": ('{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "if": "Bash(git *)"}]}]}}',
                  "hooks.PreToolUse[0].hooks[0].if"),
    "disable not bool": ('{"disableAllHooks": "yes"}', "disableAllHooks"),
    "deep": ("[" * 100000 + "]" * 100000, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_shapes_name_the_field(case: str) -> None:
    text, named = BAD[case]
    with pytest.raises(ConfigError) as raised:
        parse_json_settings(text, "s.json", "claude")
    assert named in str(raised.value)


def test_codex_events_are_its_own() -> None:
    with pytest.raises(ConfigError, match=r"hooks\.Notification"):
        parse_json_settings('{"hooks": {"Notification": []}}', "hooks.json", "codex")


def ok(label: str, stdout: str = "") -> HookOutcome:
    return HookOutcome(label, "ok", 0, stdout)


ALLOW = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})
ASK = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
                                         "permissionDecisionReason": "check it"}})
DENY = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                          "permissionDecisionReason": "never"}})


@pytest.mark.parametrize("order", [1, -1])
def test_a_block_wins_over_allow_in_either_order(order: int) -> None:
    outcomes = [ok("a", ALLOW), HookOutcome("b", "block", 2, "", "rm -rf is not allowed\n")][::order]
    code, out, err = render(combine("PreToolUse", outcomes), "PreToolUse", "claude")
    assert (code, out) == (2, "") and "rm -rf is not allowed" in err
    code, _, err = render(combine("PreToolUse", [ok("a", ALLOW), ok("b", DENY)][::order]), "PreToolUse", "claude")
    assert code == 2 and "never" in err


def test_ask_wins_over_allow_and_codex_cannot_ask() -> None:
    verdict = combine("PreToolUse", [ok("a", ALLOW), ok("b", ASK)])
    code, out, _ = render(verdict, "PreToolUse", "claude")
    assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "ask"
    code, out, err = render(verdict, "PreToolUse", "codex")
    assert (code, out) == (2, "") and "cannot ask" in err
    # Codex refuses a bare allow: nothing is printed, the normal approval flow applies.
    assert render(combine("PreToolUse", [ok("a", ALLOW)]), "PreToolUse", "codex") == (0, "", "")


@pytest.mark.parametrize("status", ["timeout", "failed"])
def test_an_unfinished_hook_blocks_a_gate_and_is_reported_elsewhere(status: str) -> None:
    outcomes = [ok("a", ALLOW), HookOutcome("b", status, note="x")]  # type: ignore[arg-type]
    code, _, err = render(combine("PreToolUse", outcomes), "PreToolUse", "claude")
    assert code == 2 and "b " in err and "verdict is unknown" in err
    code, out, _ = render(combine("PostToolUse", outcomes), "PostToolUse", "claude")
    assert code == 0 and "b " in json.loads(out)["systemMessage"]


def test_unreadable_output_is_not_an_allow() -> None:
    broken = ok("a", '{"hookSpecificOutput": {"permissionDecision": "allow"')
    assert render(combine("PreToolUse", [broken]), "PreToolUse", "claude")[0] == 2
    cut = HookOutcome("a", "ok", 0, ALLOW, output_cut=True)
    assert render(combine("PreToolUse", [cut]), "PreToolUse", "claude")[0] == 2
    wrong = ok("a", json.dumps({"hookSpecificOutput": {"permissionDecision": "maybe"}}))
    assert render(combine("PreToolUse", [wrong]), "PreToolUse", "claude")[0] == 2


def test_a_non_blocking_error_stays_non_blocking() -> None:
    # Alone, or beside hooks that decide nothing, exit 1 is reported and blocks nothing (Claude Code's rule).
    outcomes = [ok("a", ""), HookOutcome("b", "error", 1, "", "oops\n")]
    for event in ("PreToolUse", "PostToolUse"):
        code, out, _ = render(combine(event, outcomes), event, "claude")
        data = json.loads(out)
        assert code == 0 and "hookSpecificOutput" not in data
        assert "exit status 1: oops" in data["systemMessage"]
    ask = render(combine("PreToolUse", [ok("a", ASK), outcomes[1]]), "PreToolUse", "claude")
    assert ask[0] == 0 and json.loads(ask[1])["hookSpecificOutput"]["permissionDecision"] == "ask"


def test_a_failed_guard_vetoes_an_allow_on_a_gate_only() -> None:
    outcomes = [ok("a", ALLOW), HookOutcome("b", "error", 1, "", "oops\n")]
    code, out, err = render(combine("PreToolUse", outcomes), "PreToolUse", "claude")
    assert (code, out) == (2, "") and "exit status 1: oops; blocked because another hook allowed" in err
    approve = ok("a", json.dumps({"hookSpecificOutput": {"decision": {"behavior": "allow"}}}))
    assert render(combine("PermissionRequest", [approve, outcomes[1]]), "PermissionRequest", "claude")[0] == 2
    assert render(combine("PostToolUse", outcomes), "PostToolUse", "claude")[0] == 0


@pytest.mark.parametrize("status", [137, 139, 255])
def test_a_guard_killed_by_a_signal_blocks_a_gate(status: int) -> None:
    killed = HookOutcome("b", "error", status, "", "")
    for outcomes in ([ok("a", ALLOW), killed], [killed]):
        code, _, err = render(combine("PreToolUse", outcomes), "PreToolUse", "claude")
        assert code == 2 and "it was killed and its verdict is unknown" in err
    assert render(combine("PostToolUse", [killed]), "PostToolUse", "claude")[0] == 0


def test_rewrites_that_disagree_are_dropped_and_asked_about() -> None:
    def rewrite(cmd: str) -> HookOutcome:
        return ok(cmd, json.dumps({"hookSpecificOutput": {"permissionDecision": "allow",
                                                          "updatedInput": {"command": cmd}}}))
    data = json.loads(render(combine("PreToolUse", [rewrite("a"), rewrite("b")]), "PreToolUse", "claude")[1])
    assert data["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert "updatedInput" not in data["hookSpecificOutput"]
    data = json.loads(render(combine("PreToolUse", [rewrite("a")]), "PreToolUse", "codex")[1])
    assert data["hookSpecificOutput"] == {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                          "updatedInput": {"command": "a"}}


def test_contexts_and_stop() -> None:
    code, out, _ = render(combine("UserPromptSubmit", [ok("a", "plain text\n"), ok("b", json.dumps(
        {"hookSpecificOutput": {"additionalContext": "ctx"}}))]), "UserPromptSubmit", "claude")
    assert code == 0 and json.loads(out)["hookSpecificOutput"]["additionalContext"] == "ctx\n\nplain text\n"
    stop = ok("a", json.dumps({"continue": False, "stopReason": "enough"}))
    code, out, _ = render(combine("Stop", [stop]), "Stop", "claude")
    assert code == 0 and json.loads(out) == {"continue": False, "stopReason": "enough"}
    assert render(combine("PreToolUse", [stop]), "PreToolUse", "codex")[0] == 2
    code, out, _ = render(combine("Stop", [ok("a", json.dumps({"decision": "block", "reason": "tests fail"}))]),
                          "Stop", "claude")
    assert code == 2


def test_a_guard_the_sandbox_broke_blocks_only_a_gate() -> None:
    broken = HookOutcome("g", "error", 1, "", "Read-only file system\n", denied=True)
    assert render(combine("PreToolUse", [ok("a", ALLOW), broken]), "PreToolUse", "claude")[0] == 2
    assert render(combine("PostToolUse", [broken]), "PostToolUse", "claude")[0] == 0
    plain = HookOutcome("g", "error", 1, "", "oops\n")
    assert render(combine("PreToolUse", [plain]), "PreToolUse", "claude")[0] == 0
