"""The approval seam (``ctx.require(Approval)``): may this exact command run under a more
permissive sandbox mode, once?

``Approval.approve_escalation`` is the one entry point.  It refuses malformed
requests itself, remembers session approvals (for the same owner, exact command,
workdir and mode only), asks the provider's ``decide`` otherwise, and logs every
decision as a structured record (logger ``dsh.approval`` and a JSONL file).
A provider that fails, or an approval that cannot be written to the audit log,
is a denial: escalation fails closed.

Providers: ``approval-deny`` (default: deny everything), ``approval-prompt``
(asks a person on the terminal) and ``approval-rules`` (a TOML rules file).
"""

from __future__ import annotations

import abc
import datetime
import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import ConfigError, DshError
from dsh.sandbox.escalation_types import EscalationDecision as EscalationDecision
from dsh.sandbox.escalation_types import EscalationRequest as EscalationRequest
from dsh.sandbox.escalation_types import Outcome as Outcome
from dsh.sandbox.file_changes import FileChanges
from dsh.sandbox.input_files import open_private_file as open_private_file
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.numeric import seconds
from dsh.sandbox.terminal_prompt import PROMPT_CHANGES_SHOWN as PROMPT_CHANGES_SHOWN
from dsh.sandbox.terminal_prompt import TerminalPrompter as TerminalPrompter
from dsh.sandbox.terminal_prompt import changes_shown as changes_shown
from dsh.sandbox.terminal_text import TERMINAL_RESET as TERMINAL_RESET
from dsh.sandbox.terminal_text import command_shown as command_shown
from dsh.sandbox.terminal_text import printable as printable

if TYPE_CHECKING:
    from dsh.sandbox.denied_runs import DeniedRunStore

log = logging.getLogger("dsh.approval")
#: Denied runs remembered per approver (the latest ones; a model re-asks soon).
_DENIED_RUNS_KEPT = 64


@dataclass(frozen=True)
class ApprovalConfig:
    #: JSONL audit file; None: ``$DSH_HOME/escalations.jsonl`` (``~/.dsh`` by default).
    log_file: str | None = None
    #: False: log records to the ``dsh.approval`` logger only.
    log_jsonl: bool = True


def default_log_file() -> Path:
    from dsh.sandbox.own_state import dsh_home

    # The directory every run hides: the two must never disagree.
    home = dsh_home()
    if home is None:
        raise ConfigError("approval: no directory for the escalation log: this user has no HOME and no home "
                          "directory in the password database; set DSH_HOME (or HOME) to a directory of yours")
    return home / "escalations.jsonl"


class Approval(Service):
    """Service definition of ``ctx.require(Approval)``."""

    key: ClassVar[str] = "approval"
    Config: ClassVar[type[Any]] = ApprovalConfig
    config: ApprovalConfig

    def __init__(self, ctx: Context, config: Any = None) -> None:
        super().__init__(ctx, config)
        self._session: set[tuple[str, str, str, SandboxMode]] = set()
        # What the latest denied runs changed, by (owner, command, workdir):
        # a later request to run the same command wider is shown it.
        self._denied: OrderedDict[tuple[str, str, str], FileChanges] = OrderedDict()
        self._lock = threading.Lock()
        self._store: DeniedRunStore | None = None

    @property
    def provider_name(self) -> str:
        return self.plugin_name or type(self).__name__

    @abc.abstractmethod
    def decide(self, request: EscalationRequest) -> EscalationDecision:
        """The provider's own decision for a well-formed, not yet approved request."""

    def approve_escalation(self, request: EscalationRequest) -> EscalationDecision:
        # The same command in another directory is another command (its
        # .git/config, Makefile, ...), so the workdir is part of the key.
        key = (request.owner, request.command, os.path.realpath(request.workdir), request.requested_mode)
        source = "provider"
        if not request.requested_mode.is_more_permissive_than(request.current_mode):
            decision = EscalationDecision.deny(
                f"{request.requested_mode.value} is not more permissive than the current "
                f"{request.current_mode.value} mode",
                self.provider_name,
            )
            source = "seam"
        elif not request.justification.strip():
            decision = EscalationDecision.deny("a justification is required", self.provider_name)
            source = "seam"
        else:
            with self._lock:
                remembered = key in self._session
            # A session approval was given for the command, not for whatever a
            # denied run has since made of its inputs: that is asked again.
            if remembered and (request.changes is None or request.changes.clean):
                source = "session"
                decision = EscalationDecision.approve_session(
                    "approved earlier in this session for this exact command", self.provider_name
                )
            else:
                try:
                    decision = self.decide(request)
                except Exception as exc:  # a broken provider denies; it never approves
                    log.exception("approval provider %s failed", self.provider_name)
                    decision = EscalationDecision.deny(
                        f"the approval provider failed: {exc}", self.provider_name
                    )
        if not decision.provider:
            decision = EscalationDecision(decision.outcome, decision.reason, self.provider_name)
        decision = self._record(request, decision, source)
        if decision.outcome == "approve_session":
            with self._lock:
                self._session.add(key)
        return decision

    def remember_denied_run(self, owner: str, command: str, workdir: str, changes: FileChanges) -> None:
        """A sandboxed run of ``command`` was denied (or could not be watched
        to its end) after changing ``changes``: a later request to run it
        wider is a re-run of it, whose inputs may be what that run left.
        Remembered by its words (``bash  build.sh`` is ``bash build.sh``)."""
        from dsh.sandbox.denied_runs import run_key

        key = (owner, run_key(command), os.path.realpath(workdir))
        with self._lock:
            self._denied.pop(key, None)
            self._denied[key] = changes
            while len(self._denied) > _DENIED_RUNS_KEPT:
                self._denied.popitem(last=False)
        if self._store is not None:
            try:
                self._store.add(*key, changes)
            except (OSError, DshError) as exc:
                log.error("cannot record the denied run in %s: %s", self._store.path, exc)

    def denied_run_changes(self, owner: str, command: str, workdir: str) -> FileChanges | None:
        """What the latest denied run of ``command`` (the same words) in
        ``workdir`` changed, if one was remembered."""
        from dsh.sandbox.denied_runs import run_key

        key = (owner, run_key(command), os.path.realpath(workdir))
        with self._lock:
            found = self._denied.get(key)
        if found is None and self._store is not None:
            found = self._store.get(*key)
        return found

    def keep_denied_runs(self, path: Path | None = None) -> None:
        """Also keep denied runs in a file (default: beside the escalation log),
        for callers whose sessions last one call (the CLI's ``tool call``)."""
        from dsh.sandbox.denied_runs import DeniedRunStore

        self._store = DeniedRunStore(path if path is not None else self.log_path().parent / "denied-runs.jsonl")

    def log_path(self) -> Path:
        """Where the JSONL audit records go."""
        return Path(self.config.log_file) if self.config.log_file else default_log_file()

    def withdraw(self, request: EscalationRequest, reason: str) -> EscalationDecision:
        """Turn an approval of ``request`` into a denial before anything ran
        (the files it was judged on changed meanwhile): logged, and forgotten
        by the session."""
        key = (request.owner, request.command, os.path.realpath(request.workdir), request.requested_mode)
        with self._lock:
            self._session.discard(key)
        return self._record(request, EscalationDecision.deny(reason, self.provider_name), "seam")

    def _record(
        self, request: EscalationRequest, decision: EscalationDecision, source: str
    ) -> EscalationDecision:
        record: dict[str, Any] = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            **asdict(request),
            "current_mode": request.current_mode.value,
            "requested_mode": request.requested_mode.value,
            "decision": decision.outcome,
            "reason": decision.reason,
            "provider": decision.provider,
            "source": source,
        }
        # ASCII only: argv may hold bytes that are no UTF-8 (lone surrogates),
        # and control, C1 and bidi characters would act on a terminal that
        # shows the log; escaped, each reads back as it was.
        line = json.dumps(record, ensure_ascii=True, sort_keys=True)
        log.info("escalation %s", line, extra={"escalation": record})
        if not self.config.log_jsonl:
            return decision
        path = self.log_path()
        try:
            # Its directory too is reached without a link a run could have planted.
            from dsh.sandbox.own_dirs import append_to

            append_to(path, "escalation log", "set log_file or DSH_HOME", (line + "\n").encode("ascii"))
        except (OSError, DshError) as exc:
            log.error("cannot write the escalation audit log %s: %s", path, exc)
            if decision.approved:  # an approval nobody can audit is not given
                why = exc.strerror if isinstance(exc, OSError) else str(exc)
                return EscalationDecision.deny(
                    f"the escalation audit log {path} cannot be written ({why}); "
                    "set the approval provider's log_file or DSH_HOME to a writable place",
                    decision.provider,
                )
        return decision


class DenyAllApproval(Approval):
    """``approval-deny``: the default; every escalation is denied."""

    plugin_name: ClassVar[str] = "approval-deny"

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision.deny(
            "escalation is disabled here (approval-deny); work within the current mode"
        )


# -- asking a person ---------------------------------------------------------------
@dataclass(frozen=True)
class PromptConfig(ApprovalConfig):
    timeout_s: float = 60.0
    tty: str = "/dev/tty"


class PromptApproval(Approval):
    """``approval-prompt``: a person answers on the terminal (or the given streams)."""

    plugin_name: ClassVar[str] = "approval-prompt"

    Config: ClassVar[type[Any]] = PromptConfig
    config: PromptConfig

    def __init__(
        self,
        ctx: Context,
        config: PromptConfig | None = None,
        *,
        input: IO[str] | None = None,
        output: IO[str] | None = None,
    ) -> None:
        super().__init__(ctx, config)
        seconds("approval-prompt: timeout_s", self.config.timeout_s)
        self.prompter = TerminalPrompter(self.config.timeout_s, self.config.tty, input, output)

    def decide(self, request: EscalationRequest) -> EscalationDecision:
        return self.prompter.ask(request, self.provider_name)


__all__ = [
    "Approval",
    "ApprovalConfig",
    "DenyAllApproval",
    "EscalationDecision",
    "EscalationRequest",
    "PromptApproval",
    "PromptConfig",
    "TerminalPrompter",
]


# -- the CLI's --approval deny|prompt|rules:FILE ----------------------------------------
def approval_option(value: str, *, flag: str = "--approval") -> tuple[str, dict[str, Any]]:
    """``deny``, ``prompt`` or ``rules:FILE`` -> (provider name, config)."""
    if value == "deny":
        return "approval-deny", {}
    if value == "prompt":
        return "approval-prompt", {}
    if value == "elicit":  # only dsh-sandbox mcp has a client to ask; elsewhere it denies
        return "approval-elicit", {}
    if value.startswith("rules:") and value[len("rules:") :]:
        return "approval-rules", {"path": value[len("rules:") :]}
    raise ConfigError(
        f"{flag} {value!r}: use deny, prompt or rules:FILE (a TOML rules file), "
        "e.g. --approval rules:~/.config/dsh-sandbox/approvals.toml (outside every writable root)"
    )
