"""What several hooks said, combined into the one answer a harness reads.

Each hook answers the way Claude Code defines (Codex follows it): exit 0 is
success and stdout may hold JSON (``decision``, ``continue``,
``hookSpecificOutput.permissionDecision`` ...), exit 2 is a blocking error
whose stderr is the reason, any other status is a non-blocking error.

Combining is conservative: a block or deny wins over ask, ask over allow.  A
hook whose verdict cannot be read (it timed out, was killed, did not start in
the sandbox, printed broken JSON or more than was kept) is reported; on a gate
event (``PreToolUse``, ``PermissionRequest``) it blocks, because a guard that
could not answer must never turn into an allow.

The answer is rendered for the harness (``render``): a block is exit 2 with the
reasons on stderr, which both harnesses honour on every event; anything else is
exit 0 with one JSON object (or the hooks' plain text) on stdout.  Codex accepts
less JSON than Claude Code on gate events (no ``ask``, no ``allow`` without
``updatedInput``, no ``continue: false``): there those become a block.

Pure: outcomes in, (exit status, stdout, stderr) out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from dsh.sandbox.terminal_text import printable
from dsh.tools.hook_config import HookFormat

Status = Literal["ok", "block", "error", "timeout", "failed"]
Decision = Literal["block", "ask", "allow"]

GATE_EVENTS = frozenset({"PreToolUse", "PermissionRequest"})
#: Events whose ``hookSpecificOutput.additionalContext`` the harness reads.
_CONTEXT_EVENTS = {
    "claude": frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "SessionStart",
                         "SubagentStart"}),
    "codex": frozenset({"PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart"}),
}
#: Events where the harness adds a hook's plain stdout to the model's context.
_TEXT_IS_CONTEXT = frozenset({"UserPromptSubmit", "SessionStart"})
_RANK: dict[Decision | None, int] = {None: 0, "allow": 1, "ask": 2, "block": 3}


@dataclass(frozen=True)
class HookOutcome:
    """How one hook ended.  ``note``: why it failed or timed out, and what the
    sandbox reported (a denial, trusted files changed)."""

    label: str
    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    note: str = ""
    output_cut: bool = False
    denied: bool = False  # the sandbox refused it something (the run's evidence)


@dataclass(frozen=True)
class Reply:
    """What a hook that exited 0 said on stdout."""

    decision: Decision | None = None
    reason: str | None = None
    context: str | None = None
    message: str | None = None
    stop: bool = False
    stop_reason: str | None = None
    updated_input: dict[str, Any] | None = None
    text: str | None = None
    invalid: str | None = None


@dataclass(frozen=True)
class Verdict:
    decision: Decision | None
    reasons: tuple[str, ...]
    contexts: tuple[str, ...]
    messages: tuple[str, ...]
    problems: tuple[str, ...]
    texts: tuple[str, ...]
    stop: bool = False
    stop_reason: str | None = None
    updated_input: dict[str, Any] | None = None


def parse_reply(event: str, stdout: str) -> Reply:
    """The decision fields of a hook's stdout; plain text is kept as text."""
    trimmed = stdout.strip()
    if not trimmed:
        return Reply()
    if not trimmed.startswith("{"):
        return Reply(text=stdout)
    try:
        data = json.loads(trimmed)
    except (ValueError, RecursionError):
        return Reply(invalid="printed output that starts like JSON but is not JSON")
    if not isinstance(data, dict):
        return Reply(invalid="printed JSON that is not an object")
    try:
        return _reply(event, data)
    except TypeError as exc:
        return Reply(invalid=f"printed JSON with {exc}")


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} that is not a string")
    return value


def _reply(event: str, data: dict[str, Any]) -> Reply:
    proceed = data.get("continue", True)
    if not isinstance(proceed, bool):
        raise TypeError("continue that is not true or false")
    decision: Decision | None = None
    reason = _text(data, "reason")
    legacy = data.get("decision")
    if legacy == "block":
        decision = "block"
    elif legacy == "approve" and event == "PreToolUse":
        decision = "allow"
    elif legacy is not None and not isinstance(legacy, str):
        raise TypeError("decision that is not a string")
    specific = data.get("hookSpecificOutput") or {}
    if not isinstance(specific, dict):
        raise TypeError("hookSpecificOutput that is not an object")
    updated = specific.get("updatedInput")
    if updated is not None and not isinstance(updated, dict):
        raise TypeError("updatedInput that is not an object")
    if event == "PreToolUse":
        permission = _text(specific, "permissionDecision")
        if permission in ("deny", "ask", "allow"):
            decision = "block" if permission == "deny" else permission  # type: ignore[assignment]
            reason = _text(specific, "permissionDecisionReason") or reason
        elif permission not in (None, "defer"):
            raise TypeError(f"permissionDecision {permission!r} (allow, deny, ask or defer)")
    if event == "PermissionRequest" and specific.get("decision") is not None:
        chosen = specific["decision"]
        behavior = chosen.get("behavior") if isinstance(chosen, dict) else None
        if behavior not in ("allow", "deny"):
            raise TypeError("a PermissionRequest decision whose behavior is not allow or deny")
        decision = "allow" if behavior == "allow" else "block"
        reason = _text(chosen, "message") or reason
    return Reply(decision=decision, reason=reason, context=_text(specific, "additionalContext"),
                 message=_text(data, "systemMessage"), stop=not proceed, stop_reason=_text(data, "stopReason"),
                 updated_input=updated if event == "PreToolUse" else None)


def combine(event: str, outcomes: list[HookOutcome]) -> Verdict:
    """Every hook's answer, combined: block > ask > allow; unreadable verdicts
    block on gate events and are reported everywhere."""
    gate = event in GATE_EVENTS
    decision: Decision | None = None
    reasons: list[str] = []
    contexts: list[str] = []
    messages: list[str] = []
    problems: list[str] = []
    texts: list[str] = []
    inputs: list[dict[str, Any]] = []
    stop, stop_reason = False, None
    failed_guards: list[str] = []  # gate hooks that failed without a verdict (exit 1, say)

    def vote(choice: Decision, why: str) -> None:
        nonlocal decision
        if _RANK[choice] > _RANK[decision]:
            decision = choice
        if choice == "block" or why:
            reasons.append(why)

    for out in outcomes:
        unread = _unreadable(out)
        if unread is not None:
            problems.append(f"{out.label} {unread}")
            if gate:
                vote("block", f"{out.label} {unread}; blocked because its verdict is unknown")
            continue
        if out.note:
            problems.append(f"{out.label}: {out.note}")
        if out.status == "block":
            vote("block", out.stderr.strip() or f"{out.label} exited 2 without a reason")
            continue
        if out.status == "error":
            first = out.stderr.strip().splitlines()[:1]
            failed = f"{out.label} failed with exit status {out.exit_code}" + (f": {first[0]}" if first else "")
            problems.append(printable(failed))
            if gate and out.denied:
                # The sandbox broke the guard: its failure says nothing about the call.
                vote("block", f"{failed}; blocked because the sandbox denied it something and its verdict is unknown")
            elif gate and out.exit_code is not None and out.exit_code >= 128:
                # 128+N: killed by a signal (the OOM killer, a crash), not an answer.
                vote("block", f"{failed}; blocked because it was killed and its verdict is unknown")
            elif gate:
                failed_guards.append(failed)
            continue
        reply = parse_reply(event, out.stdout)
        if reply.invalid is not None:
            problems.append(f"{out.label} {reply.invalid}")
            if gate:
                vote("block", f"{out.label} {reply.invalid}; blocked because its verdict is unknown")
            continue
        if reply.decision is not None:
            vote(reply.decision, reply.reason or (f"{out.label} denied it" if reply.decision == "block" else ""))
        if reply.stop:
            stop = True
            stop_reason = stop_reason or reply.stop_reason or f"{out.label} stopped the session"
        contexts += [reply.context] if reply.context else []
        messages += [reply.message] if reply.message else []
        texts += [reply.text] if reply.text else []
        if reply.updated_input is not None:
            inputs.append(reply.updated_input)
    if failed_guards and decision == "allow":
        # A failed guard decides nothing, but an allow skips the user's own
        # approval: it must come from every guard that ran, so it fails closed.
        for failed in failed_guards:
            vote("block", f"{failed}; blocked because another hook allowed the call that this guard could not check")
    updated = inputs[0] if inputs and all(i == inputs[0] for i in inputs) else None
    if inputs and updated is None:
        vote("ask", "the hooks rewrote the tool input in different ways; none of the rewrites is applied")
    elif updated is not None and decision is None:
        # A rewrite alone approves nothing: the changed call is still asked about.
        vote("ask", "a hook rewrote the tool input")
    return Verdict(decision, tuple(reasons), tuple(contexts), tuple(messages), tuple(problems), tuple(texts),
                   stop, stop_reason, updated if decision != "block" else None)


def _unreadable(out: HookOutcome) -> str | None:
    if out.status == "timeout":
        return f"timed out{' ' + out.note if out.note else ''}"
    if out.status == "failed":
        return f"did not run: {out.note or 'unknown failure'}"
    if out.output_cut and out.status == "ok":
        return "printed more output than is kept; its answer was not read"
    return None


def render(verdict: Verdict, event: str, fmt: HookFormat) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the bridge, as ``fmt``'s harness reads them."""
    notes = "".join(f"dsh-sandbox hook: {p}\n" for p in verdict.problems)
    decision = verdict.decision
    codex_gate = fmt == "codex" and event in GATE_EVENTS
    if codex_gate and verdict.stop:
        return 2, "", _lines((verdict.stop_reason or "a hook stopped the session",), notes)
    if codex_gate and decision == "ask":
        cannot = "a hook asked for confirmation, which a Codex hook cannot ask; blocked"
        return 2, "", _lines((*verdict.reasons, cannot), notes)
    if verdict.stop:
        out: dict[str, Any] = {"continue": False, "stopReason": verdict.stop_reason}
        if decision == "block":
            out.update(_block_json(event, verdict.reasons))
        return 0, json.dumps(out) + "\n", notes
    if decision == "block":
        # A problem that is already a blocking reason is said once.
        rest = "".join(f"dsh-sandbox hook: {p}\n" for p in verdict.problems
                       if not any(r.startswith(p) for r in verdict.reasons))
        return 2, "", _lines(verdict.reasons, rest)
    specific: dict[str, Any] = {}
    if event == "PreToolUse" and decision is not None:
        if fmt == "claude" or verdict.updated_input is not None:
            specific["permissionDecision"] = decision
            if verdict.reasons:
                specific["permissionDecisionReason"] = "\n".join(r for r in verdict.reasons if r)
        if verdict.updated_input is not None:
            specific["updatedInput"] = verdict.updated_input
    if event == "PermissionRequest" and decision == "allow":
        specific["decision"] = {"behavior": "allow"}
    contexts = verdict.contexts + (verdict.texts if event in _TEXT_IS_CONTEXT else ())
    if contexts and event in _CONTEXT_EVENTS[fmt]:
        specific["additionalContext"] = "\n\n".join(contexts)
    result: dict[str, Any] = {}
    if specific:
        result["hookSpecificOutput"] = {"hookEventName": event, **specific}
    messages = verdict.messages + tuple(f"dsh-sandbox hook: {p}" for p in verdict.problems)
    if messages:
        result["systemMessage"] = "\n".join(messages)
    if result:
        return 0, json.dumps(result) + "\n", notes
    return 0, "".join(t if t.endswith("\n") else t + "\n" for t in verdict.texts), notes


def _block_json(event: str, reasons: tuple[str, ...]) -> dict[str, Any]:
    why = "\n".join(r for r in reasons if r)
    if event == "PreToolUse":
        return {"hookSpecificOutput": {"hookEventName": event, "permissionDecision": "deny",
                                       "permissionDecisionReason": why}}
    if event == "PermissionRequest":
        return {"hookSpecificOutput": {"hookEventName": event, "decision": {"behavior": "deny", "message": why}}}
    return {"decision": "block", "reason": why}


def _lines(reasons: tuple[str, ...], notes: str) -> str:
    return "".join(f"{r.rstrip()}\n" for r in reasons if r) + notes
