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
  what the run keeps there (its HOME) is bound again on top;
- ``show``: a path a runner without the host underneath (a container) must bind
  read-only: the read-only workspace, the sandbox HOME, the enclosing repository.

What the plan cannot express comes back as ``PlanGap`` values (a protected
path reached through a symlink inside a writable root: a mount cannot cover
the link itself); each runner names them with its own degradation.

The planner reads nothing from the live filesystem: ``gather_facts`` takes that snapshot
first (``MountFacts``), so the rules are tested on synthetic facts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dsh.sandbox.enclosing_repo import enclosing_repository
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.own_state import state_parents
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import fixed_symlink, git_dirs, is_within, path_within, system_dir_reason
from dsh.sandbox.runner import Gap

MountKind = Literal["writable", "pin", "private-tmp", "read-only", "placeholder", "mask-dir", "mask-file", "show"]
PathKind = Literal["dir", "file", "symlink", "other", "missing", "placeholder"]

#: Same depth, same path: writable first, then read-only, then hidden on top.
_RANK: dict[MountKind, int] = {
    "writable": 0, "pin": 0, "private-tmp": 0, "show": 1, "read-only": 1, "placeholder": 1,
    "mask-dir": 2, "mask-file": 2,
}
_WRITABLE: frozenset[MountKind] = frozenset(("writable", "pin"))

#: Where a runner with a mount namespace shows the session's private temporary directory.
TMP = "/tmp"

#: Mode that marks an empty directory as a dsh placeholder (nobody may write in it).
PLACEHOLDER_MODE = 0o555


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


@dataclass(frozen=True)
class PathFact:
    """One path as ``lstat`` saw it, its canonical target, and whether a
    symlink there is fixed for the command (``fixed_symlink``)."""

    kind: PathKind
    real: str
    fixed_link: bool = False

    @property
    def absent(self) -> bool:
        """Missing, or only a placeholder left by a sandbox that did not clean up."""
        return self.kind in ("missing", "placeholder")


@dataclass(frozen=True)
class MountFacts:
    """The snapshot of the live filesystem the planner works from."""

    paths: Mapping[str, PathFact] = field(default_factory=dict)
    #: The work tree of the repository enclosing the workspace and its git dirs outside it.
    enclosing: tuple[str, ...] = ()
    #: That work tree is the home directory or a system directory: never shown whole.
    enclosing_system: bool = False
    #: dsh-sandbox's state directories that lead to what the run keeps (``own_state.state_parents``).
    state_parents: tuple[str, ...] = ()

    def of(self, path: str) -> PathFact:
        fact = self.paths.get(path)
        if fact is None:
            # The snapshot follows each link it meets; a path it did not take
            # is one a concurrent swap sent the plan to (a link's target that
            # changed between two looks), or a bug in ``gather_facts``.  Either
            # way, guessing "missing" could plan a weaker view: refuse.
            raise SandboxUnavailable(f"{path} changed while the sandbox was being planned (no fact gathered for "
                                     "it: a path swapped for a symlink meanwhile?); nothing ran, retry")
        return fact


def depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def ancestors(path: str) -> list[str]:
    """Strict ancestors of an absolute path, shallowest first (``/`` excluded)."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


_within = path_within


class _Planner:
    def __init__(self, facts: MountFacts, hidden: Iterable[str]) -> None:
        self.facts = facts
        self.entries: dict[str, MountEntry] = {}
        self.gaps: list[PlanGap] = []
        self.hidden = tuple(hidden)
        self.overridden: list[str] = []

    def hidden_over(self, path: str, intent: str) -> bool:
        """Is ``path`` a hidden path or inside one?  Binding anything there
        would put its contents back on top of the mask."""
        cover = next((h for h in self.hidden if _within(path, h)), None)
        if cover is None:
            return False
        self.overridden.append(f"{intent} {path}: inside hidden {cover} (hidden wins: not mounted)")
        return True

    def writable_at(self, path: str) -> bool:
        """Is the host's ``path`` writable under the entries planned so far (deepest wins)?

        Beneath the private ``/tmp`` the host's path is not there at all: it
        needs a bind of its own to be written, or seen.
        """
        best: MountEntry | None = None
        for e in self.entries.values():
            if e.kind != "show" and _within(path, e.path) and (best is None or depth(e.path) > depth(best.path)):
                best = e
        return best is not None and best.writable

    def add(self, kind: MountKind, path: str, why: str) -> None:
        # On one path the more restrictive rule wins: read-only over writable.
        old = self.entries.get(path)
        if old is None or _RANK[old.kind] < _RANK[kind]:
            self.entries[path] = MountEntry(kind, path, why)

    def pin_ancestors(self, path: str, why: str) -> None:
        for anc in ancestors(path):
            if anc not in self.entries and self.writable_at(anc):
                self.add("pin", anc, f"keeps {why} from being renamed away")

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


def _roots(policy: SandboxPolicy) -> list[str]:
    if policy.mode is SandboxMode.READ_ONLY:
        return []
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        return [str(p) for p in dict.fromkeys((policy.workspace, *policy.writable_roots))]
    return [str(p) for p in policy.writable_roots]


def plan_mounts(policy: SandboxPolicy, facts: MountFacts) -> MountPlan:
    """The mounts on top of the host's read-only filesystem for ``policy``.

    danger-full-access: only the workspace and the writable roots, writable
    (what a runner that does not show the host needs; the others do not wrap).
    """
    planner = _Planner(facts, ())
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        for root in _roots(policy):
            if _is_dir(facts.of(root)) and not planner.writable_at(root):
                planner.add("writable", root, "writable root")
        return MountPlan(_ordered(planner))
    hidden = [facts.of(str(p)).real for p in policy.hidden_paths]
    planner.hidden = tuple(h for h in hidden if facts.of(h).kind != "missing")
    kept = kept_paths(policy)
    # Beneath a private /tmp the host's state directory is not there to mask.
    private = policy.mode is SandboxMode.WORKSPACE_WRITE and policy.private_tmp is not None
    masks = [p for p in facts.state_parents if facts.of(p).kind == "dir" and not (private and _within(p, TMP))
             and not planner.hidden_over(p, "state mask")]
    for real in planner.hidden:
        if any(_within(real, m) for m in masks) and not any(_within(real, k) for k in kept):
            continue  # the mask of its state directory hides it (and an entry made there later)
        planner.add("mask-dir" if facts.of(real).kind == "dir" else "mask-file", real, "hidden")
    for mask in masks:
        planner.add("mask-dir", mask, "dsh-sandbox's state: only what this run keeps is bound again")
    if policy.mode is SandboxMode.WORKSPACE_WRITE and policy.private_tmp is not None:
        _private_tmp(planner, policy)
    intents: list[tuple[str, int, str]] = [(r, 0, "root") for r in _roots(policy)]
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
        if (any(_within(path, m) for m in masks) and path not in planner.entries
                and _is_dir(facts.of(path)) and not planner.writable_at(path)):
            planner.add("read-only", path, "this run's own state, shown again over the mask of its directory")
    _show(planner, policy)
    return MountPlan(_ordered(planner), tuple(dict.fromkeys(planner.gaps)), tuple(dict.fromkeys(planner.overridden)))


def kept_paths(policy: SandboxPolicy) -> list[str]:
    """What of dsh-sandbox's state a run keeps: its roots, its HOME, its private /tmp."""
    return [str(p) for p in (*policy.writable_roots, policy.home, policy.private_tmp) if p is not None]


def _private_tmp(planner: _Planner, policy: SandboxPolicy) -> None:
    """The session's directory at ``/tmp``, and the host's repository the
    workspace lies in shown again beneath it, read-only (git must find it)."""
    if any(_within(TMP, str(r)) for r in policy.writable_roots) or planner.hidden_over(TMP, "private /tmp"):
        return  # a root that holds /tmp is writable as the host's, searched like any root
    planner.entries[TMP] = MountEntry("private-tmp", TMP, "the session's private /tmp; the host's is not visible",
                                      str(policy.private_tmp))
    for shown in planner.facts.enclosing:
        if depth(shown) <= depth(TMP) or not _within(shown, TMP):
            continue  # outside /tmp: visible (read-only) already
        if any(_within(shown, str(r)) for r in policy.writable_roots):
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
        if any(_within(path, h) for h in planner.hidden):
            continue  # hidden wins
        if any(e.writable and _within(path, e.path) for e in planner.entries.values()):
            continue  # visible through a writable bind already
        planner.add("show", path, why)


def _ordered(planner: _Planner) -> tuple[MountEntry, ...]:
    return tuple(sorted(planner.entries.values(), key=lambda e: (depth(e.path), _RANK[e.kind], e.path)))


# -- the snapshot ----------------------------------------------------------------------
def is_placeholder(path: str) -> bool:
    """An empty directory with the placeholder mode (left by a sandbox)."""
    try:
        st = os.lstat(path)
        return stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == PLACEHOLDER_MODE and not os.listdir(path)
    except OSError:
        return False


def path_fact(path: str, uid: int) -> PathFact:
    real = os.path.realpath(path)
    try:
        st = os.lstat(path)
    except OSError:
        return PathFact("missing", real)
    if stat.S_ISLNK(st.st_mode):
        return PathFact("symlink", real, fixed_symlink(path, uid))
    if stat.S_ISDIR(st.st_mode):
        return PathFact("placeholder" if is_placeholder(path) else "dir", real)
    if stat.S_ISREG(st.st_mode):
        return PathFact("file", real)
    return PathFact("other", real)


def _enclosing(workspace: Path) -> tuple[tuple[Path, ...], bool]:
    """What of the repository the workspace lies in must be visible (its work
    tree strictly above the workspace and its git dirs outside it; or, for a
    workspace that is a repository's top, its git dirs elsewhere), and whether
    that work tree is the home directory or a system directory (a dotfiles
    repository would show all of ``~``)."""
    repo = enclosing_repository(workspace)
    if repo is not None:
        return repo.paths(), system_dir_reason(repo.top) is not None
    return tuple(d for d in git_dirs(workspace / ".git") if not is_within(d, workspace)), False


def gather_facts(policy: SandboxPolicy, uid: int) -> MountFacts:
    """Everything ``plan_mounts`` will ask about ``policy``'s paths, as it is now.

    ``uid`` is the command's: a symlink it cannot replace is no gap.
    """
    wanted: set[str] = {str(policy.workspace), *(str(r) for r in policy.writable_roots)}
    if policy.home is not None:
        wanted.add(str(policy.home))
    found, system = _enclosing(policy.workspace) if policy.constrained else ((), False)
    enclosing = tuple(str(p) for p in found)
    wanted.update(enclosing)
    kept = kept_paths(policy)
    wanted.update(kept)
    parents = tuple(sorted(state_parents(kept))) if policy.constrained else ()
    wanted.update(parents)
    paths: dict[str, PathFact] = {}
    for raw in (*policy.protected_paths, *policy.read_only_paths, *policy.hidden_paths):
        path = os.path.abspath(raw)
        real = os.path.realpath(path)
        for p in (path, real):
            wanted.update((*ancestors(p), p))
    for path in wanted:
        paths[path] = path_fact(path, uid)
    return MountFacts(paths, enclosing, system, parents)
