"""The fail-closed gate: a partial enforcement runs only if every degradation is accepted.

What a runner reports (``Enforcement``, made of ``Gap``s), the one check on it
(``Enforcement.accepted_by``, ``check_accepted``) and the one wording of a
refusal live here, for the host's choice and for the preamble of every
runner's ``prepare``.  The refusal is written for a person: grouped by
degradation, each distinct reason once, long path lists shortened, and the
exact flag that would accept it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dsh.sandbox.capability import PROTECTED_PATHS, Capability
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.policy import SandboxPolicy


@dataclass(frozen=True)
class Gap:
    """One part of a policy a runner cannot enforce here.

    ``degradation`` is the name a profile lists in ``accept_degraded`` (or the
    user passes to ``--accept-degraded``) to run anyway; ``reason`` says what
    stays open and why.
    """

    degradation: str
    reason: str


@dataclass(frozen=True)
class Enforcement:
    """How completely a runner enforces a mode here.

    ``level`` is ``full`` or ``partial``; ``gaps`` are the parts it cannot
    enforce.  A partial enforcement whose degradations are not all accepted is
    refused (fail closed; see ``dsh.sandbox.gate``).
    """

    level: Literal["full", "partial"]
    gaps: tuple[Gap, ...] = ()

    @classmethod
    def full(cls) -> Enforcement:
        return cls("full")

    @classmethod
    def partial(cls, gaps: Sequence[Gap]) -> Enforcement:
        return cls("partial", tuple(gaps))

    @property
    def missing(self) -> tuple[str, ...]:
        """Each gap's reason, in order."""
        return tuple(g.reason for g in self.gaps)

    @property
    def degradations(self) -> tuple[str, ...]:
        """The distinct degradation names, in order."""
        return tuple(dict.fromkeys(g.degradation for g in self.gaps))

    def reasons_for(self, degradation: str) -> tuple[str, ...]:
        return tuple(g.reason for g in self.gaps if g.degradation == degradation)

    def accepted_by(self, policy: SandboxPolicy) -> bool:
        return self.level == "full" or set(self.degradations) <= set(policy.accept_degraded)

    def describe(self) -> str:
        if self.level == "full":
            return "full"
        return "partial: " + "; ".join(self.missing)


#: Paths listed per slot before "+N more".
MAX_PATHS = 3
_PATH = LazyPattern(r"(?<![\w.~])/[^\s,:;()'\"\[\]]*")


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


# -- what the host adds to every runner's report -------------------------------------------
SCAN_DEGRADATION = "protected-scan-incomplete"
#: Degradations the host reports for every runner (profiles accept them by name),
#: with the capabilities they weaken.
HOST_DEGRADATIONS: Mapping[str, tuple[Capability, ...]] = {SCAN_DEGRADATION: (PROTECTED_PATHS,)}


def with_scan_gap(enforcement: Enforcement, policy: SandboxPolicy) -> Enforcement:
    """Every runner's enforcement, plus the roots the policy could not search:
    a repository or protected name deeper in them is writable."""
    if not policy.unscanned_roots:
        return enforcement
    gap = Gap(
        SCAN_DEGRADATION,
        "nested repositories and protected names were not searched for in "
        + ", ".join(map(str, policy.unscanned_roots))
        + " (too many entries, unreadable or too deep): any there stay writable",
    )
    return Enforcement.partial((*enforcement.gaps, gap))
