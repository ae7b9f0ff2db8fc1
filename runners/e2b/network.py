"""A network allowlist as E2B's own egress rules.

E2B's sandboxes take ``network={"allow_out": [...], "deny_out": [...]}`` when
they are created: everything denied (``0.0.0.0/0``), the allowlist's names,
wildcards and addresses allowed.  E2B, not dsh-sandbox, enforces them, in its
own way: names are matched on the TLS server name (SNI) or the HTTP ``Host``
header on ports 443 and 80 only, other ports by address; a name needs DNS, so
its resolver stays reachable; ``allow_out`` wins over ``deny_out``, and
``deny_out`` takes addresses only.  What that cannot hold is a degradation the
policy must accept (``e2b-network-by-sni``), and what it cannot express at all
(a ``deny`` list) is refused.
"""

from __future__ import annotations

from typing import Any

from dsh.sandbox.net_rules import NetworkRules
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Gap

SNI_DEGRADATION = "e2b-network-by-sni"
#: E2B's spelling of every destination.
ALL_TRAFFIC = "0.0.0.0/0"

SNI_GAP = Gap(
    SNI_DEGRADATION,
    "with a network allowlist, E2B (not dsh-sandbox) enforces it: names are matched on the TLS server name "
    "(SNI) or HTTP Host header on ports 443 and 80 only (a client that sends an allowed name to another "
    "address may get through), other ports by address, DNS stays open (queries can carry data out), a blocked "
    "connection may look open, and refused hosts are not reported",
)


def egress(rules: NetworkRules) -> dict[str, Any]:
    """The ``network`` argument of ``Sandbox.create`` for ``rules``."""
    return {"allow_out": list(rules.allow), "deny_out": [ALL_TRAFFIC]}


def create_args(policy: SandboxPolicy, *, debug: bool) -> dict[str, Any]:
    """How ``Sandbox.create`` gets ``policy``'s network: egress rules for an
    allowlist (never in debug mode, which refuses one), else on or off."""
    if policy.network_allowlist is not None and not policy.network and not debug:
        return {"network": egress(policy.network_allowlist)}
    return {"allow_internet_access": policy.network}


def refusal(rules: NetworkRules, *, debug: bool) -> str | None:
    """Why ``rules`` cannot be handed to E2B, or ``None``."""
    if debug:
        return ("debug mode (a local envd, no E2B API call) cannot apply network rules; nothing ran: run with "
                "the E2B API, or --runner bwrap")
    if rules.deny:
        return ("E2B's deny_out takes addresses only and its allow_out wins over it, so the allowlist's deny "
                f"({', '.join(rules.deny)}) cannot be held; nothing ran: drop deny, or run with --runner bwrap")
    return None


def plan_line(rules: NetworkRules) -> str:
    return ("allowlist: E2B's egress rules (deny_out 0.0.0.0/0, allow_out " + ", ".join(rules.allow)
            + "), names matched by SNI or Host on ports 443 and 80")
