"""The fail-closed gate: a partial enforcement runs only if every degradation is accepted.

One check and one wording for the host and for every runner that re-checks
before it launches.  The refusal is written for a person: grouped by
degradation, each distinct reason once, long path lists shortened, and the
exact flag that would accept it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Enforcement

#: Paths listed per slot before "+N more".
MAX_PATHS = 3
_PATH = re.compile(r"(?<![\w.~])/[^\s,:;()'\"\[\]]*")


def unaccepted(enforcement: Enforcement, policy: SandboxPolicy) -> tuple[str, ...]:
    """The degradations of ``enforcement`` that ``policy`` does not accept."""
    if enforcement.level == "full":
        return ()
    return tuple(d for d in enforcement.degradations if d not in policy.accept_degraded)


def accept_hint(names: Iterable[str], *, runner: str | None = None) -> str:
    """The flags that accept ``names``.  With ``runner`` (the host's refusal
    under ``auto``) the runner is pinned too: accepting one runner's
    degradations must never let ``auto`` pick another, weaker one."""
    flags = " ".join(f"--accept-degraded {n}" for n in names)
    if runner is None:
        return f"to accept: {flags} (or accept_degraded in the profile)"
    return f"to run on {runner} as it is: --runner {runner} {flags} (or runner and accept_degraded in the config)"


def best_refused(refused: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[str, tuple[str, ...]] | None:
    """Of the runners refused for their degradations (in ``auto`` order), the
    one to suggest: the fewest unaccepted degradations, ``auto``'s order on a tie."""
    if not refused:
        return None
    return min(refused, key=lambda item: len(item[1]))


def _paths(values: Sequence[str]) -> str:
    distinct = list(dict.fromkeys(values))
    if len(distinct) == 1:
        return distinct[0]
    # Paths that exist come first: they are what the command can touch now.
    distinct.sort(key=lambda p: not os.path.lexists(p))
    shown = ", ".join(distinct[:MAX_PATHS])
    more = len(distinct) - MAX_PATHS
    return "{" + shown + (f", +{more} more" if more > 0 else "") + "}"


def summarize(reasons: Iterable[str]) -> list[str]:
    """Each distinct reason once; reasons that differ only in their paths become one line."""
    groups: dict[tuple[str, ...], list[list[str]]] = {}
    for reason in dict.fromkeys(reasons):
        parts = tuple(_PATH.split(reason))
        groups.setdefault(parts, []).append(_PATH.findall(reason))
    lines = []
    for parts, slots in groups.items():
        text = parts[0]
        for i, rest in enumerate(parts[1:]):
            text += _paths([paths[i] for paths in slots]) + rest
        lines.append(text)
    return lines


def refusal_lines(enforcement: Enforcement, policy: SandboxPolicy, *, indent: str = "  ") -> list[str]:
    """One line per unaccepted degradation: its name and its reasons, deduplicated."""
    lines = []
    for name in unaccepted(enforcement, policy):
        lines.append(f"{indent}{name}: " + "; ".join(summarize(enforcement.reasons_for(name)) or [name]))
    return lines


def check_accepted(enforcement: Enforcement, policy: SandboxPolicy, *, runner: str) -> None:
    """Raise ``SandboxUnavailable`` unless ``policy`` accepts every degradation (fail closed)."""
    if enforcement.accepted_by(policy):
        return
    names = unaccepted(enforcement, policy)
    lines = [f"enforces {policy.mode} only partially; nothing ran:", *refusal_lines(enforcement, policy)]
    if names:
        lines.append(accept_hint(names))
    raise SandboxUnavailable("\n".join(lines), runner=runner, degradations=names)
