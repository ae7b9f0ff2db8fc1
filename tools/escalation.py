"""One-shot, approval-gated escalation for the shell tools.

A call that carries ``sandbox_permissions`` asks to run *its exact command*
once under a strictly more permissive mode than the session's.  The request
is refused before anything runs when the mode is unknown, equal or stricter,
or the justification is missing; otherwise the shared escalation flow
(``dsh.executors.escalation``) asks the approval seam (deny-all when no
provider is mounted).  Only an approval lets the tool run,
and only that command, once, under that mode; session approvals are the
approval seam's, keyed by the exact command, its workdir and the mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsh.executors import escalation as flow
from dsh.executors.seam import ShellExecutor
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode
from dsh.tools.render import escalation_line


class EscalationRejected(Exception):
    """The escalation was refused; ``message`` is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Escalation:
    mode: SandboxMode
    scope: str  # "once" or "session"

    @property
    def marker(self) -> str:
        return escalation_line(self.mode, self.scope)


def _reject(why: str) -> EscalationRejected:
    return EscalationRejected(f"Escalation rejected: {why} Nothing was run.")


def requested_mode(shell: ShellExecutor, args: dict[str, Any]) -> SandboxMode | None:
    """Check the escalation fields without asking anyone; None when none was asked.

    Raises ``EscalationRejected`` for a request that can never be approved.
    """
    raw = args.get("sandbox_permissions")
    if raw is None:
        if "justification" in args:
            raise _reject("justification was given without sandbox_permissions (the mode to ask for).")
        return None
    current = shell.sandbox_mode
    if current is None or not shell.constraining:
        raise _reject("commands here are not sandboxed, so there is nothing to escalate.")
    try:
        mode = SandboxMode.parse(raw, field="sandbox_permissions")
    except ConfigError as exc:
        raise _reject(f"{exc}.") from None
    if not mode.is_more_permissive_than(current):
        raise _reject(
            f"sandbox_permissions {mode.value!r} is not more permissive than the current "
            f"{current.value!r} mode; escalation can only ask for more access "
            f"(more permissive than {current.value}: "
            + ", ".join(m.value for m in SandboxMode if m.is_more_permissive_than(current))
            + ")."
        )
    if not str(args.get("justification", "")).strip():
        raise _reject(
            f"a justification is required: say why this exact command needs {mode.value} access."
        )
    return mode


def granted(grant: flow.Grant) -> Escalation:
    """What the shared flow's answer means to the model: the escalation to mark
    on the result, or ``EscalationRejected`` on deny."""
    if not grant.approved:
        by = f" by {grant.decision.provider}" if grant.decision.provider else ""
        raise _reject(f"running this command under {grant.mode.value} was denied{by}: {grant.decision.reason}.")
    return Escalation(grant.mode, grant.scope)
