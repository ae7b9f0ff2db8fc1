"""One escalation flow for every caller: the shell tools and the ``run`` command.

A caller names the exact command, where it runs and the wider mode it wants;
``Approval.approve_escalation`` is the only place that decides.  On approval
the caller runs that exact command once, resolved under the granted mode
(``Grant.resolve``); on denial nothing more runs.  Without an approval
provider the deny-all one answers, so escalation is denied by default.

Two ways in: ``ask`` before a run (the model asked for a mode with
``sandbox_permissions``), and ``after_denial`` once a sandboxed run was denied
(``run --approval``: the least permissive wider mode that would have allowed
what was denied is asked for).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from dsh.executors.denial import Denial, find_denial
from dsh.executors.seam import ShellExecRequest, ShellExecSpec, ShellExecutor, ShellRunResult
from dsh.sandbox.approval import Approval, DenyAllApproval, EscalationDecision, EscalationRequest
from dsh.sandbox.context import Context
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_service import PolicyService


@dataclass(frozen=True)
class Grant:
    """The approval seam's answer to one escalation request."""

    mode: SandboxMode
    decision: EscalationDecision

    @property
    def approved(self) -> bool:
        return self.decision.approved

    @property
    def scope(self) -> Literal["once", "session"]:
        return "session" if self.decision.outcome == "approve_session" else "once"

    def resolve(self, shell: ShellExecutor, request: ShellExecRequest) -> ShellExecSpec:
        """``request`` resolved under the granted mode (only once approved)."""
        if not self.approved:
            raise PermissionError(f"escalation to {self.mode.value} was not approved")
        return shell.resolve(dataclasses.replace(request, sandbox_mode=self.mode))


def approver(ctx: Context, approval: Approval | None = None) -> Approval:
    """``approval`` if given, else the context's provider, else deny-all."""
    if approval is not None:
        return approval
    mounted = ctx.get(Approval)
    return mounted if mounted is not None else DenyAllApproval(ctx)


def ask(
    ctx: Context,
    shell: ShellExecutor,
    *,
    mode: SandboxMode,
    command: str,
    workdir: str,
    justification: str,
    tool: str,
    owner: str,
    approval: Approval | None = None,
) -> Grant:
    """Ask the approval seam whether ``command`` may run once under ``mode``."""
    current = shell.sandbox_mode
    if current is None or not shell.constraining:
        raise ValueError("escalation needs a constraining (sandboxed) executor")
    decision = approver(ctx, approval).approve_escalation(
        EscalationRequest(
            command=command,
            workdir=workdir,
            current_mode=current,
            requested_mode=mode,
            justification=justification.strip(),
            tool=tool,
            owner=owner,
        )
    )
    return Grant(mode, decision)


def _evidence(spec: ShellExecSpec, result: ShellRunResult, policy: SandboxPolicy) -> Denial | None:
    return find_denial(
        policy,
        exit_code=result.exit_code,
        outputs=(result.stderr.text, result.stdout.text),
        workdir=spec.workdir,
    )


def wider_mode_for(ctx: Context, shell: ShellExecutor, spec: ShellExecSpec, result: ShellRunResult) -> SandboxMode:
    """The least permissive wider mode under which the denial's evidence is no
    denial (e.g. a write inside the workspace needs workspace-write, not full access)."""
    current = shell.sandbox_mode
    assert current is not None  # only constraining executors report denials
    wider = sorted((m for m in SandboxMode if m.is_more_permissive_than(current)), key=lambda m: m.rank)
    if spec.sandbox_policy is not None and _evidence(spec, result, spec.sandbox_policy) is not None:
        policies = ctx.require(PolicyService)
        for mode in wider[:-1]:
            if _evidence(spec, result, policies.resolve(mode)) is None:
                return mode
    return wider[-1]


def after_denial(
    ctx: Context,
    shell: ShellExecutor,
    spec: ShellExecSpec,
    result: ShellRunResult,
    *,
    tool: str,
    owner: str,
    requested_by: str,
    approval: Approval | None = None,
) -> Grant | None:
    """Ask to re-run a denied run once under a wider mode; None when the run was
    not denied by a constraining executor (nothing to ask).  ``requested_by``
    completes the justification: who asked for the re-run."""
    facts = result.sandbox
    if facts is None or not facts.denied or not shell.constraining:
        return None
    current = shell.sandbox_mode
    assert current is not None
    target = wider_mode_for(ctx, shell, spec, result)
    denial = _evidence(spec, result, spec.sandbox_policy) if spec.sandbox_policy else None
    # The evidence is the command's own output and exit status: say so, since a
    # hostile command can print a denial it never met to be offered more.
    what = f" ({denial.path}, as its own output says)" if denial is not None else " (as its own output says)"
    return ask(
        ctx,
        shell,
        mode=target,
        command=spec.command,
        workdir=spec.workdir,
        justification=f"it was denied under {current.value} mode{what}; a re-run was requested {requested_by}",
        tool=tool,
        owner=owner,
        approval=approval,
    )
