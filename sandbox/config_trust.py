"""Before a run or a tool call: the files that configure the session, and the
escalation log, must lie outside every writable root of its policy.

A command that could rewrite the composition, the profile (or a file it
extends), the approval rules file or the escalation log would choose its own
next sandbox or forge what was approved.  The check reads the session's
mounted policy service, so it sits above it (the guard's path rules sit below).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.policy_guard import refuse_writable_config_file, refuse_writable_log, writable_root_holding
from dsh.sandbox.policy_service import PolicyService


def refuse_untrusted_config(ctx: Context, composition: str | None, approval: Any = None) -> None:
    """Refuse ``run``/``tool call`` when the composition, the profile (and each
    file it extends) or the approval rules file lies inside a writable root of
    the session's policy (its workspace-write roots, whatever the mode: an
    earlier workspace-write run could have written there)."""
    service = ctx.get(PolicyService)
    if service is None:
        return
    roots = service.trusted_roots()
    if composition is not None:
        refuse_writable_config_file("--composition", composition, roots, real=getattr(ctx, "composition_file", None))
    for source in service.profile.sources:  # real paths of the files read
        refuse_writable_config_file("profile", source, roots, real=source)
    approver = approval if approval is not None else _mounted_approval(ctx)
    if getattr(getattr(approver, "config", None), "log_jsonl", False):
        refuse_writable_log(approver.log_path(), roots)
    rules = getattr(getattr(approver, "config", None), "path", None)
    if isinstance(rules, str):
        read = getattr(approver, "rules_real_path", None)
        refuse_writable_config_file("approval rules file", rules, roots, real=read if isinstance(read, str) else None)
    log = getattr(getattr(approver, "config", None), "log_file", None)
    if isinstance(log, str):
        _refuse_writable_log(log, roots)


def _refuse_writable_log(shown: str, roots: Sequence[Path]) -> None:
    """An escalation log a sandboxed command could rewrite (forging what was
    approved, or reading what others ran) is refused like a config file."""
    real = Path(os.path.realpath(os.path.expanduser(shown)))
    root = writable_root_holding(real, roots)
    if root is not None:
        raise ConfigError(
            f"approval log_file {shown}: {real} lies inside the writable root {root}, so a sandboxed command "
            "could read or rewrite the escalation record; move it outside every writable root, e.g. to ~/.dsh/"
        )


def _mounted_approval(ctx: Context) -> Any:
    # No approval provider can be mounted unless its definition's module was
    # imported, and ``run`` without --approval must not pay for importing it.
    module = sys.modules.get("dsh.sandbox.approval")
    return None if module is None else ctx.get(module.Approval)
