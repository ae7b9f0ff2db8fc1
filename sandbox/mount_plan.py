"""The filesystem view of a sandbox, planned once for every runner (pure).

``plan_mounts(policy, facts)`` turns a ``SandboxPolicy`` into an ordered tuple
of ``MountEntry`` values that a runner with a mount namespace (a namespace
sandbox, a user-space kernel, a container) only translates into its own flags or spec.  The view starts from
the host's filesystem read-only; on top of it, ordered by path depth so a more
specific rule always lands on top of a broader one:

- ``writable``: a writable root, bound read-write onto itself (a root nested
  in another writable root is bound only when a read-only rule above it would
  hide it);
- ``read-only``: an existing protected or read-only path inside a writable area;
- ``placeholder``: a protected path that does not exist yet: its first missing
  component becomes an empty directory (mode ``PLACEHOLDER_MODE``) bound
  read-only onto itself, so nothing can be created there;
- ``pin``: a writable directory between a writable root and a protected path,
  bound read-write onto itself.  A mount point cannot be renamed (EBUSY), so
  ``mv sub sub2 && mkdir -p sub/.git`` cannot move the protected path aside and
  create an unprotected one at its old name;
- ``private-tmp``: the session's private temporary directory (``source``)
  bound read-write at ``/tmp``: the host's ``/tmp`` is invisible beneath it,
  so a host path there is bound again only when the policy needs it (a
  writable root; the repository enclosing the workspace, read-only, so git
  finds it); nothing else of the shared ``/tmp`` can be written, or even seen;
- ``mask-dir`` / ``mask-file``: a hidden path, covered by an empty read-only
  tmpfs or by ``/dev/null``.  Hidden wins over every other rule: nothing is
  bound at or below a hidden path, and ``overridden`` lists the rules it beat.
  dsh-sandbox's state directories are masked whole, whatever they hold, and
  what the run keeps there (its HOME) is bound again on top; a directory most
  of whose entries are hidden gets one mask too, its other entries bound
  again read-only (fewer mounts: each costs a namespace sandbox a pass over
  the mount table);
- ``show``: a path a runner without the host underneath (a container) must bind
  read-only: the read-only workspace, the sandbox HOME, the enclosing repository.

What the plan cannot express comes back as ``PlanGap`` values (a protected
path reached through a symlink inside a writable root: a mount cannot cover
the link itself); each runner names them with its own degradation.

The planner reads nothing from the live filesystem: ``gather_facts``
(``mount_facts``) takes that snapshot first (``MountFacts``), so the rules are
tested on synthetic facts.  Every lookup is by path, one per directory above
it, never a pass over every entry or hidden path: a run hides hundreds of
other workspaces' HOMEs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_facts import (
    PLACEHOLDER_MODE,
    TMP,
    MountFacts,
    PathFact,
    PathKind,
    ancestors,
    depth,
    gather_facts,
    hidden_per_directory,
    is_placeholder,
    kept_paths,
    one_mask_pays,
    plan_roots,
)
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import path_within
from dsh.sandbox.runner import Gap

__all__ = [
    "PLACEHOLDER_MODE", "TMP", "MountEntry", "MountFacts", "MountKind", "MountPlan", "PathFact", "PathKind",
    "PlanGap", "ancestors", "depth", "gather_facts", "is_placeholder", "kept_paths", "plan_mounts",
]

MountKind = Literal["writable", "pin", "private-tmp", "read-only", "placeholder", "mask-dir", "mask-file", "show"]

#: Same depth, same path: writable first, then read-only, then hidden on top.
_RANK: dict[MountKind, int] = {
    "writable": 0, "pin": 0, "private-tmp": 0, "show": 1, "read-only": 1, "placeholder": 1,
    "mask-dir": 2, "mask-file": 2,
}
_WRITABLE: frozenset[MountKind] = frozenset(("writable", "pin"))


@dataclass(frozen=True)
class MountEntry:
    kind: MountKind
    path: str
    why: str
    source: str | None = None  # private-tmp only: the host directory shown at ``path``

    @property
    def writable(self) -> bool:
        return self.kind in _WRITABLE

    def describe(self) -> str:
        source = f" from {self.source}" if self.source else ""
        return f"{self.kind} {self.path}{source} ({self.why})"


@dataclass(frozen=True)
class PlanGap:
    """A part of the policy no mount can hold; ``kind`` is runner-neutral."""

    kind: Literal["protected-symlink"]
    path: str
    reason: str


@dataclass(frozen=True)
class MountPlan:
    entries: tuple[MountEntry, ...]
    gaps: tuple[PlanGap, ...] = ()
    #: Rules a hidden path overrides, for ``explain``.
    overridden: tuple[str, ...] = ()

    def gaps_for(self, runner: str) -> tuple[Gap, ...]:
        """The gaps as ``runner``'s degradations (``<runner>-protected-symlink``)."""
        return tuple(dict.fromkeys(Gap(f"{runner}-{g.kind}", g.reason) for g in self.gaps))

    def of_kind(self, *kinds: MountKind) -> tuple[MountEntry, ...]:
        return tuple(e for e in self.entries if e.kind in kinds)

    @property
    def sources(self) -> tuple[str, ...]:
        """Every host path a translator binds from (what must not change under it)."""
        return tuple(e.source or e.path for e in self.entries
                     if e.kind in ("writable", "pin", "private-tmp", "read-only", "show"))


class _Planner:
    def __init__(self, facts: MountFacts, hidden: Iterable[str]) -> None:
        self.facts = facts
        self.entries: dict[str, MountEntry] = {}
        self.gaps: list[PlanGap] = []
        self.overridden: list[str] = []
        self.set_hidden(hidden)

    def set_hidden(self, hidden: Iterable[str]) -> None:
        self.hidden = tuple(hidden)
        # Each hidden path's place in ``hidden``: ``hidden_cover`` looks up a
        # path's ancestors here, not every hidden path.
        self._hidden_at = {h: i for i, h in reversed(list(enumerate(self.hidden)))}

    def hidden_cover(self, path: str) -> str | None:
        """The first hidden path (in the policy's order) that is ``path`` or holds it."""
        if not path.startswith("/") or os.path.normpath(path) != path:
            return next((h for h in self.hidden if path_within(path, h)), None)
        found = [self._hidden_at[a] for a in ("/", *ancestors(path), path) if a in self._hidden_at]
        return self.hidden[min(found)] if found else None

    def hidden_over(self, path: str, intent: str) -> bool:
        """Is ``path`` a hidden path or inside one?  Binding anything there
        would put its contents back on top of the mask."""
        cover = self.hidden_cover(path)
        if cover is None:
            return False
        self.overridden.append(f"{intent} {path}: inside hidden {cover} (hidden wins: not mounted)")
        return True

    def _deepest_at(self, path: str) -> MountEntry | None:
        """The deepest planned entry at or above ``path`` (``show`` entries
        aside: they come last and never make a path writable)."""
        at = path
        while True:
            found = self.entries.get(at)
            if found is not None and found.kind != "show":
                return found
            if at == "/":
                return None
            at = os.path.dirname(at)

    def writable_at(self, path: str) -> bool:
        """Is the host's ``path`` writable under the entries planned so far (deepest wins)?

        Beneath the private ``/tmp`` the host's path is not there at all: it
        needs a bind of its own to be written, or seen.
        """
        best = self._deepest_at(path)
        return best is not None and best.writable

    def add(self, kind: MountKind, path: str, why: str) -> None:
        # On one path the more restrictive rule wins: read-only over writable.
        old = self.entries.get(path)
        if old is None or _RANK[old.kind] < _RANK[kind]:
            self.entries[path] = MountEntry(kind, path, why)

    def pin_ancestors(self, path: str, why: str) -> None:
        """Make every writable ancestor of ``path`` a mount point (not renamable).

        Shallowest first, carrying the deepest entry seen down the chain: one
        lookup per ancestor, so a deep tree costs its depth, not its square."""
        best = self._deepest_at("/")
        for anc in ancestors(path):
            here = self.entries.get(anc)
            if here is not None and here.kind != "show":
                best = here
                continue
            if best is not None and best.writable:
                best = MountEntry("pin", anc, f"keeps {why} from being renamed away")
                self.entries[anc] = best

    def first_missing(self, path: str) -> str:
        for candidate in [*ancestors(path), path]:
            if self.facts.of(candidate).absent:
                return candidate
        return path

    def keep_read_only(self, path: str, why: str) -> None:
        """A protected or read-only path: existing, missing or behind a symlink."""
        fact = self.facts.of(path)
        real = fact.real
        if self.hidden_over(path, why) or self.hidden_over(real, why):
            return
        if real != path:
            # Some component is a symlink: protect what it points at; the link
            # itself stays replaceable (a mount cannot cover a symlink).
            if self.writable_at(path) and not fact.fixed_link:
                self.gaps.append(PlanGap(
                    "protected-symlink", path,
                    f"{why} {path} is reached through a symlink inside a writable root: its target {real} "
                    "is read-only, but the link can be replaced (a mount cannot cover a symlink)"))
                self.pin_ancestors(path, path)
            self.keep_read_only(real, why)
            return
        if not self.writable_at(path):
            return  # read-only already: nothing to add
        if not fact.absent:
            self.pin_ancestors(path, path)
            self.add("read-only", path, why)
            return
        missing = self.first_missing(path)
        self.pin_ancestors(missing, path)
        self.add("placeholder", missing, f"{why} {path} does not exist yet")


def _is_dir(fact: PathFact) -> bool:
    return fact.kind in ("dir", "placeholder")


def plan_mounts(policy: SandboxPolicy, facts: MountFacts) -> MountPlan:
    """The mounts on top of the host's read-only filesystem for ``policy``.

    danger-full-access: only the workspace and the writable roots, writable
    (what a runner that does not show the host needs; the others do not wrap).
    """
    planner = _Planner(facts, ())
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        for root in plan_roots(policy):
            if _is_dir(facts.of(root)) and not planner.writable_at(root):
                planner.add("writable", root, "writable root")
        return MountPlan(_ordered(planner))
    planner.set_hidden(h for h in _hidden_reals(policy, facts) if facts.of(h).kind != "missing")
    kept = kept_paths(policy)
    # Beneath a private /tmp the host's state directory is not there to mask.
    private = policy.mode is SandboxMode.WORKSPACE_WRITE and policy.private_tmp is not None
    roots = plan_roots(policy)
    masks = [p for p in facts.state_parents if facts.of(p).kind == "dir" and not (private and path_within(p, TMP))
             and not planner.hidden_over(p, "state mask")]
    covered = _covering_masks(planner.hidden, roots, facts, frozenset(masks))
    for real in planner.hidden:
        if any(path_within(real, m) for m in masks) and not any(path_within(real, k) for k in kept):
            continue  # the mask of its state directory hides it (and an entry made there later)
        if os.path.dirname(real) in covered:
            continue  # the mask of its directory hides it
        planner.add("mask-dir" if facts.of(real).kind == "dir" else "mask-file", real, "hidden")
    for mask in masks:
        planner.add("mask-dir", mask, "dsh-sandbox's state: only what this run keeps is bound again")
    for parent, (count, shown) in covered.items():
        planner.add("mask-dir", parent, f"hidden: its {count} entries; what else it holds is bound again")
        for path in shown:
            planner.add("read-only", path, "not hidden: shown again over the mask of its directory")
    if private:
        _private_tmp(planner, policy)
    intents: list[tuple[str, int, str]] = [(r, 0, "root") for r in roots]
    intents += [(str(p), 1, "read-only") for p in policy.read_only_paths]
    intents += [(str(p), 1, "protected") for p in policy.protected_paths]
    for path, _rank, intent in sorted(intents, key=lambda i: (depth(i[0]), i[1], i[0])):
        if intent == "root":
            if planner.hidden_over(path, "writable root"):
                continue
            if _is_dir(facts.of(path)) and not planner.writable_at(path):
                planner.add("writable", path, "writable root")
        else:
            planner.keep_read_only(path, intent)
    for path in kept:
        if (any(path_within(path, m) for m in masks) and path not in planner.entries
                and _is_dir(facts.of(path)) and not planner.writable_at(path)):
            planner.add("read-only", path, "this run's own state, shown again over the mask of its directory")
    # A mask moves with a directory above it that is renamed: pinned, a run
    # cannot ``mv`` a hidden path aside for the next run to read.
    for entry in [e for e in planner.entries.values() if e.kind in ("mask-dir", "mask-file")]:
        planner.pin_ancestors(entry.path, f"hidden {entry.path}")
    _show(planner, policy)
    return MountPlan(_ordered(planner), tuple(dict.fromkeys(planner.gaps)), tuple(dict.fromkeys(planner.overridden)))


def _hidden_reals(policy: SandboxPolicy, facts: MountFacts) -> list[str]:
    """The hidden paths as they are now.  The policy holds each in its
    canonical form; one that resolves elsewhere now went through a link
    swapped in since (a concurrent run exchanging a directory above it for a
    link): masking where it leads would leave the real one shown."""
    reals = []
    for path in map(str, policy.hidden_paths):
        if path in facts.state_hidden:
            continue  # its state directory's mask hides it
        fact = facts.of(path)
        real = fact.real
        if real != path and os.path.normpath(path) == path and os.path.isabs(path):
            if fact.kind == "symlink":
                # Not a race to retry: the path itself is a link, and stays one.
                raise SandboxUnavailable(
                    f"the hidden path {path} is a symbolic link to {real} (swapped in after the policy was "
                    "resolved, or left in dsh-sandbox's own state, where no run makes one); masking where it "
                    f"leads would leave the link itself shown, so nothing ran: remove it (rm {path}) or put "
                    "back what was there, and run again")
            raise SandboxUnavailable(f"the hidden path {path} now resolves to {real} (a directory above it was "
                                     "replaced by a symlink after the policy was resolved); nothing ran, retry")
        reals.append(real)
    return reals


def _covering_masks(hidden: tuple[str, ...], roots: list[str], facts: MountFacts,
                    masked: frozenset[str]) -> dict[str, tuple[int, list[str]]]:
    """Directories most of whose entries are hidden: one mask over the
    directory, what is not hidden bound again on top (a writable root by the
    roots' rule, anything else read-only here), instead of one mask per entry:
    ``{directory: (hidden entries, entries to show read-only)}``.

    The mask hides at least what the entries' masks did (an entry made after
    the listing too).  Only directories ``facts.listings`` has (canonical,
    outside ``/tmp``, the roots and the state directories, which ``masked``
    covers whole); one with a link, a FIFO, a socket or a device among its
    other entries keeps the masks of its entries (a mount cannot cover a
    link, and a runtime that opens what it binds (runsc's gofer) blocks on a
    FIFO and cannot bind a socket), as does one where showing
    the rest would take more mounts than it saves.  Even one hidden entry is
    worth it: an entry removed between the listing and the mounts (another
    session ending) would make a namespace sandbox fail to mount it."""
    by_parent = {parent: count for parent, count in hidden_per_directory(hidden).items()
                 if parent in facts.listings and parent not in masked}
    hidden_set, root_set = frozenset(hidden), frozenset(roots)
    out: dict[str, tuple[int, list[str]]] = {}
    for parent, count in by_parent.items():
        if any(path_within(parent, r) for r in roots):
            continue
        others = [os.path.join(parent, n) for n in facts.listings[parent]]
        others = [k for k in others if k not in hidden_set]
        if any(facts.of(k).kind not in ("dir", "file", "placeholder") for k in others):
            continue
        shown = [k for k in others if k not in root_set or not _is_dir(facts.of(k))]
        if one_mask_pays(count, len(shown)):  # the roots are bound either way
            out[parent] = (count, shown)
    return out


def _private_tmp(planner: _Planner, policy: SandboxPolicy) -> None:
    """The session's directory at ``/tmp``, and the host's repository the
    workspace lies in shown again beneath it, read-only (git must find it)."""
    if any(path_within(TMP, str(r)) for r in policy.writable_roots) or planner.hidden_over(TMP, "private /tmp"):
        return  # a root that holds /tmp is writable as the host's, searched like any root
    planner.entries[TMP] = MountEntry("private-tmp", TMP, "the session's private /tmp; the host's is not visible",
                                      str(policy.private_tmp))
    for shown in planner.facts.enclosing:
        if depth(shown) <= depth(TMP) or not path_within(shown, TMP):
            continue  # outside /tmp: visible (read-only) already
        if any(path_within(shown, str(r)) for r in policy.writable_roots):
            continue  # bound with its root, its git dir kept read-only by the protected paths
        if not planner.hidden_over(shown, "enclosing repository"):
            planner.add("read-only", shown, "the repository enclosing the workspace, read-only")


def _show(planner: _Planner, policy: SandboxPolicy) -> None:
    """What a runner without the host underneath must bind read-only to be usable."""
    wanted = [(str(policy.workspace), "workspace")]
    if policy.home is not None:
        wanted.append((str(policy.home), "sandbox home"))
    if not planner.facts.enclosing_system:
        wanted += [(p, "the repository enclosing the workspace") for p in planner.facts.enclosing]
    for path, why in wanted:
        if path in planner.entries or not _is_dir(planner.facts.of(path)):
            continue
        if any(path_within(path, h) for h in planner.hidden):
            continue  # hidden wins
        if any(e.writable and path_within(path, e.path) for e in planner.entries.values()):
            continue  # visible through a writable bind already
        planner.add("show", path, why)


def _ordered(planner: _Planner) -> tuple[MountEntry, ...]:
    return tuple(sorted(planner.entries.values(), key=lambda e: (depth(e.path), _RANK[e.kind], e.path)))
