"""One escalation flow for every caller: the shell tools and the ``run`` command.

A caller names the exact command, where it runs and the wider mode it wants;
``Approval.approve_escalation`` is the only place that decides.  On approval
the caller runs that exact command once, resolved under the granted mode
(``Grant.resolve``); on denial nothing more runs.  Without an approval
provider the deny-all one answers, so escalation is denied by default.

Two ways in: ``ask`` before a run (the model asked for a mode with
``sandbox_permissions``), and ``after_denial`` once a sandboxed run was denied
(``run --approval``: the least permissive wider mode that would have allowed
what was denied is asked for).  A model's request is a re-run too when it
repeats a command that was denied: ``remember`` tells the approver what that
run changed, and ``ask`` shows it.

A re-run after a denial reads what the denied run left behind.  So when an
approver other than deny-all may be asked, ``watch`` snapshots the writable
roots before the run; ``after_denial`` tells the approver what the run
created, modified and deleted there (a rules file then approves nothing), and
withdraws an approval if the files change again while the approver decided.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from dsh.executors.denial import Denial, find_denial
from dsh.executors.seam import ShellExecRequest, ShellExecSpec, ShellExecutor, ShellRunResult
from dsh.sandbox.approval import Approval, DenyAllApproval, EscalationDecision, EscalationRequest
from dsh.sandbox.context import Context
from dsh.sandbox.file_changes import FileChanges, TreeSnapshot, compare, snapshot
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_service import PolicyService
from dsh.sandbox.terminal_text import printable


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
    argv: tuple[str | bytes, ...] | None = None,
    changes: FileChanges | None = None,
) -> Grant:
    """Ask the approval seam whether ``command`` may run once under ``mode``.

    ``argv``: the exact argv when it runs without a shell; ``changes``: for a
    re-run, what the denied run changed (see ``after_denial``).  Without
    ``changes``, a denied run of the same command the approver was told about
    (``remember``) makes this request a re-run of it."""
    deciding = approver(ctx, approval)
    if changes is None:
        changes = deciding.denied_run_changes(owner, command, workdir)
    request = _request(shell, mode, command, workdir, justification, tool, owner, argv, changes)
    return Grant(mode, deciding.approve_escalation(request))


def _request(
    shell: ShellExecutor, mode: SandboxMode, command: str, workdir: str, justification: str, tool: str,
    owner: str, argv: tuple[str | bytes, ...] | None, changes: FileChanges | None,
) -> EscalationRequest:
    current = shell.sandbox_mode
    if current is None or not shell.constraining:
        raise ValueError("escalation needs a constraining (sandboxed) executor")
    words: tuple[str, ...] | None = None
    if argv is not None:
        try:
            words = tuple(w if isinstance(w, str) else w.decode("utf-8") for w in argv)
        except UnicodeDecodeError:
            words = None  # no text a rule could name: only an exact 'command' string matches
    return EscalationRequest(
        command=command,
        workdir=workdir,
        current_mode=current,
        requested_mode=mode,
        justification=justification.strip(),
        tool=tool,
        owner=owner,
        argv=words,
        shell="" if argv is not None else getattr(shell, "shell_kind", "bash"),
        changes=changes,
    )


def watch(approval: Approval | None, spec: ShellExecSpec) -> TreeSnapshot | None:
    """A snapshot of ``spec``'s writable roots before it runs, when a denial
    could be escalated to someone who approves (none for deny-all: the walk
    is only paid for where it can matter)."""
    if approval is None or isinstance(approval, DenyAllApproval) or spec.sandbox_policy is None:
        return None
    if not spec.sandbox_policy.constrained:
        return None
    return snapshot(spec.sandbox_policy.writable_roots)


def remember(
    ctx: Context,
    spec: ShellExecSpec,
    result: ShellRunResult | None,
    before: TreeSnapshot | None,
    *,
    owner: str,
    approval: Approval | None = None,
) -> None:
    """Tell the approver what a watched run changed when it was denied, so a
    later request to run the same command wider (a model's
    ``sandbox_permissions``) is judged as the re-run it is.  ``result`` None:
    the run was still going when the caller stopped watching; whether it will
    be denied, and what it will have changed, cannot be told."""
    if before is None:
        return
    if result is None:
        changes = FileChanges.unknown("the run was still going when its result was returned")
    elif result.sandbox is not None and result.sandbox.denied:
        changes = compare(before, snapshot(before.roots))
    else:
        return
    approver(ctx, approval).remember_denied_run(owner, spec.command, spec.workdir, changes)


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
    before: TreeSnapshot | None = None,
) -> Grant | None:
    """Ask to re-run a denied run once under a wider mode; None when the run was
    not denied by a constraining executor (nothing to ask).  ``requested_by``
    completes the justification: who asked for the re-run.  ``before``: the
    ``watch`` snapshot taken before the run; without it what the run changed
    is unknown, and no rule approves."""
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
    if before is None:
        changes, after = FileChanges.unknown("the writable roots were not watched during the denied run"), None
    else:
        after = snapshot(before.roots)
        changes = compare(before, after)
    justification = f"it was denied under {current.value} mode{what}; a re-run was requested {requested_by}"
    grant = ask(
        ctx, shell, mode=target, command=spec.command, workdir=spec.workdir, justification=justification,
        tool=tool, owner=owner, approval=approval, argv=spec.argv, changes=changes,
    )
    if grant.approved and after is not None:
        # A process the denied run left behind, or the host, may have changed
        # the files while the approver read the list: what was approved is gone.
        # (Where the walk could not tell, the approver was shown that instead.)
        late = compare(after, snapshot(after.roots))
        if late.total:
            first = [printable(p) for p in (late.created + late.modified + late.deleted)[:3]]
            request = _request(shell, target, spec.command, spec.workdir, justification, tool, owner,
                               spec.argv, changes)
            return Grant(target, approver(ctx, approval).withdraw(
                request,
                f"{late.total} file(s) under the writable roots changed while the approval was asked "
                f"({', '.join(first)}): the approved re-run would not read what was shown",
            ))
    return grant
