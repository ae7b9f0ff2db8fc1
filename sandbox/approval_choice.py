"""The approval provider a ``--approval deny|prompt|rules:FILE`` value names.

Built directly, not through entry points (``run`` must start fast), and in a
module of its own: it knows every built-in provider, which know the seam.
"""

from __future__ import annotations

from dsh.sandbox.approval import Approval, DenyAllApproval, PromptApproval, approval_option
from dsh.sandbox.context import Context


def build_approval(ctx: Context, value: str, *, flag: str = "--approval") -> Approval:
    """The approval provider ``value`` names (not mounted; ``ctx.provide`` it)."""
    name, config = approval_option(value, flag=flag)
    # Imported directly, not through entry points: ``run`` must start fast.
    if name == "approval-rules":
        from dsh.sandbox.approval_rules import RulesApproval, RulesConfig

        return RulesApproval(ctx, RulesConfig(**config))
    if name == "approval-prompt":
        return PromptApproval(ctx)
    return DenyAllApproval(ctx)
