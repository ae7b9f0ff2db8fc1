"""The values of one escalation: what is asked, and the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsh.sandbox.file_changes import FileChanges
from dsh.sandbox.modes import SandboxMode

Outcome = Literal["approve_once", "approve_session", "deny"]


@dataclass(frozen=True)
class EscalationRequest:
    command: str  # the exact command, as the model sent it
    workdir: str
    current_mode: SandboxMode
    requested_mode: SandboxMode
    justification: str
    tool: str
    owner: str
    #: The exact argv when the command runs without a shell (``run -- ARGV``).
    argv: tuple[str, ...] | None = None
    #: Who reads ``command``: ``bash`` or ``pwsh`` (rules parse only bash).
    shell: str = "bash"
    #: For a re-run after a denial: what the denied run created, modified and
    #: deleted under the writable roots (``incomplete`` when that is unknown).
    #: None: not a re-run (the model asked before running anything).
    changes: FileChanges | None = None


@dataclass(frozen=True)
class EscalationDecision:
    outcome: Outcome
    reason: str = ""
    provider: str = ""

    @classmethod
    def approve_once(cls, reason: str = "", provider: str = "") -> EscalationDecision:
        return cls("approve_once", reason, provider)

    @classmethod
    def approve_session(cls, reason: str = "", provider: str = "") -> EscalationDecision:
        return cls("approve_session", reason, provider)

    @classmethod
    def deny(cls, reason: str, provider: str = "") -> EscalationDecision:
        return cls("deny", reason, provider)

    @property
    def approved(self) -> bool:
        return self.outcome != "deny"
