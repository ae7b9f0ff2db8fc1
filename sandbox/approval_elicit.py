"""``approval-elicit``: the person behind an MCP client answers, through the client.

The provider knows nothing of MCP: the server that serves the session attaches
an asker (``attach``), which puts the question to the client of the call that
asked (MCP elicitation) and returns the answer.  Without an asker (no MCP
server, or a client that cannot be asked) every escalation is denied, naming
why: escalation fails closed.  The seam logs every decision, as for the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from dsh.sandbox.approval import Approval, EscalationDecision, EscalationRequest
from dsh.sandbox.terminal_prompt import changes_shown
from dsh.sandbox.terminal_text import command_shown, printable

#: Asks the client; returns "once", "session" or a reason to deny.
Asker = Callable[[str], str]

#: The answers the client's form offers.
CHOICES = ("deny", "once", "session")


def question(request: EscalationRequest) -> str:
    """What the client shows its user: the exact command, escaped, and what it asks for."""
    return (
        f"A sandboxed command asks to run once under {request.requested_mode.value} "
        f"(now {request.current_mode.value}).\n"
        f"{command_shown(request.command)}"
        f"  workdir:       {printable(request.workdir)}\n"
        f"  justification: {printable(request.justification)}\n"
        f"{changes_shown(request.changes)}"
        "Approve it once, for this session (this exact command, workdir and mode), or deny?"
    )


class ElicitApproval(Approval):
    """Provider ``approval-elicit`` (``--approval elicit`` under ``dsh-sandbox mcp``)."""

    plugin_name: ClassVar[str] = "approval-elicit"

    _asker: Asker | None = None

    def attach(self, asker: Asker | None) -> None:
        """Who puts the question to the client (None: nobody; every request is denied)."""
        self._asker = asker

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        asker = self._asker
        if asker is None:
            return EscalationDecision.deny(
                "approval-elicit asks an MCP client, and none is connected (it works only under "
                "dsh-sandbox mcp); work within the current mode"
            )
        answer = asker(question(request))
        if answer == "once":
            return EscalationDecision.approve_once("approved by the MCP client's user")
        if answer == "session":
            return EscalationDecision.approve_session("approved for this session by the MCP client's user")
        return EscalationDecision.deny(answer)
