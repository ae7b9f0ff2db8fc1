"""``dsh-sandbox run --approval prompt|rules:FILE``: escalate a denied run.

When a sandboxed run was denied, the approval provider is asked whether the
same command may run once under the least permissive mode that would have
allowed what was denied; on approval the caller re-runs it exactly once under
that mode.  ``--approval deny`` (and no approval at all) never asks.
"""

from __future__ import annotations

import dataclasses
import getpass
from typing import Any

from dsh.executors.seam import ShellExecRequest, ShellExecSpec, ShellRunResult
from dsh.sandbox.approval import Approval, EscalationRequest
from dsh.sandbox.modes import SandboxMode


def _evidence(spec: ShellExecSpec, result: ShellRunResult, policy: Any) -> Any:
    from dsh.executors.denial import find_denial

    return find_denial(
        policy,
        exit_code=result.exit_code,
        outputs=(result.stderr.text, result.stdout.text),
        workdir=spec.workdir,
    )


def escalation_target(ctx: Any, spec: ShellExecSpec, result: ShellRunResult) -> SandboxMode:
    """The least permissive wider mode under which the denial's evidence is no
    denial (e.g. a write inside the workspace needs workspace-write, not full access)."""
    current: SandboxMode = ctx.shell.sandbox_mode
    wider = sorted((m for m in SandboxMode if m.is_more_permissive_than(current)), key=lambda m: m.rank)
    if spec.sandbox_policy is not None and _evidence(spec, result, spec.sandbox_policy) is not None:
        for mode in wider[:-1]:
            if _evidence(spec, result, ctx.sandbox_policy.resolve(mode)) is None:
                return mode
    return wider[-1]


def escalated_spec(
    ctx: Any,
    approver: Approval | None,
    request: ShellExecRequest,
    spec: ShellExecSpec,
    result: ShellRunResult,
    *,
    note: Any,
) -> ShellExecSpec | None:
    """The spec to re-run once under an approved mode, or None (nothing to re-run).

    ``approver`` is built before the first run (``run.approver_for``), so a broken
    or untrusted rules file stops the command before it runs, not after."""
    facts = result.sandbox
    shell = ctx.shell
    if facts is None or not facts.denied or not shell.constraining or approver is None:
        return None
    current: SandboxMode = shell.sandbox_mode
    target = escalation_target(ctx, spec, result)
    denial = _evidence(spec, result, spec.sandbox_policy) if spec.sandbox_policy else None
    what = f" ({denial.path})" if denial is not None else ""
    decision = approver.approve_escalation(
        EscalationRequest(
            command=spec.command,
            workdir=spec.workdir,
            current_mode=current,
            requested_mode=target,
            justification=f"it was denied under {current.value} mode{what}; "
            "a re-run was requested at the terminal",
            tool="dsh-sandbox run",
            owner=getpass.getuser(),
        )
    )
    if not decision.approved:
        note(f"escalation to {target.value} denied by {decision.provider}: {decision.reason}")
        return None
    note(f"escalation approved by {decision.provider}: re-running once under {target.value}")
    resolved: ShellExecSpec = shell.resolve(dataclasses.replace(request, sandbox_mode=target))
    return resolved
