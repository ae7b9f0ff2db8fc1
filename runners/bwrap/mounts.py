"""The filesystem view of a bwrap sandbox: which mounts express a ``SandboxPolicy``.

Everything starts from ``--ro-bind / /`` (read-only everywhere); then, ordered
by path depth so a more specific rule always lands on top of a broader one:

- ``bind``: a writable root, bound read-write onto itself;
- ``ro-bind``: an existing protected or read-only path inside a writable area;
- ``placeholder``: a protected path that does not exist yet.  Its first missing
  component is created as an empty directory (mode 0555) and bound read-only
  onto itself, so nothing can be created there; removed again after the run
  when no other sandbox uses it;
- ``pin``: a writable directory between a writable root and a protected path,
  bound read-write onto itself.  A mount point cannot be renamed (EBUSY), so
  ``mv sub sub2 && mkdir -p sub/.git`` cannot move the protected path aside and
  create an unprotected one at its old name;
- ``private-tmp``: the session's private temporary directory bound at
  ``/tmp``: the host's ``/tmp`` is invisible beneath it, so a host path there
  is bound again only when the policy needs it (a writable root, the
  repository enclosing the workspace, read-only so git finds it); nothing else
  of the shared ``/tmp`` can be written, or even seen;
- ``mask-dir`` / ``mask-file``: a hidden path, covered by an empty read-only
  tmpfs or by ``/dev/null``.  Hidden wins over every other rule: nothing is
  bound at or below a hidden path (a protected ``.env`` that is also hidden
  stays unreadable), and ``explain`` lists the rules it overrides.

A read-only view does not stop ``connect()`` to a unix socket: host sockets
are kept out of reach by the syscall filter (``filter``), not by mounts, so
nothing here depends on which sockets exist when the sandbox starts.

``plan_mounts`` only inspects the filesystem; ``open_mounts`` (in
``materialize``) opens every bind source as an ``O_PATH`` fd and passes it with
``--bind-fd``/``--ro-bind-fd``: bwrap runs as root in CI, so a source path swapped
for a symlink between planning and mounting must not redirect a writable bind.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from dsh.sandbox import own_state
from dsh.sandbox.enclosing_repo import enclosing_repository
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import TMP, ancestors, depth, is_placeholder, kept_paths
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import canonical, fixed_symlink
from dsh.sandbox.policy_paths import path_within as is_within
from dsh.sandbox.runner import Gap

MountKind = Literal["bind", "pin", "private-tmp", "ro-bind", "placeholder", "mask-dir", "mask-file"]

#: Same depth, same path: writable first, then read-only, then hidden on top.
_RANK: dict[MountKind, int] = {
    "bind": 0,
    "pin": 0,
    "private-tmp": 0,
    "ro-bind": 1,
    "placeholder": 1,
    "mask-dir": 2,
    "mask-file": 2,
}
_WRITABLE_KINDS = ("bind", "pin")

#: How deep (directories below ``/``) a path kept read-only may lie: a bwrap
#: setup with this many nested mounts takes a second or two.
MAX_DEPTH = 200
_PATH_MAX = 4096

#: Degradation name a profile lists in ``accept_degraded`` to accept it.
SYMLINK_DEGRADATION = "bwrap-protected-symlink"


@dataclass(frozen=True)
class Mount:
    kind: MountKind
    path: str
    why: str
    source: str | None = None  # private-tmp only: the host directory bound at ``path``

    @property
    def writable(self) -> bool:
        return self.kind in _WRITABLE_KINDS

    def describe(self) -> str:
        source = f" from {self.source}" if self.source else ""
        return f"{self.kind} {self.path}{source} ({self.why})"


@dataclass(frozen=True)
class MountPlan:
    mounts: tuple[Mount, ...]
    degradations: tuple[Gap, ...] = ()
    #: Rules a hidden path overrides, for ``explain``.
    overridden: tuple[str, ...] = ()


class _Planner:
    def __init__(self, hidden: Iterable[str] = ()) -> None:
        self.mounts: dict[str, Mount] = {}
        self.degradations: list[Gap] = []
        self.hidden = tuple(hidden)
        # Each hidden path's place in ``hidden``: ``hidden_over`` looks up a
        # path's ancestors here, not every hidden path (one per other workspace).
        self._hidden_at = {h: i for i, h in reversed(list(enumerate(self.hidden)))}
        self.overridden: list[str] = []

    def hidden_over(self, path: str, intent: str) -> bool:
        """Is ``path`` a hidden path or inside one?  Hidden wins over every other rule.

        Binding a protected, read-only or writable path inside a hidden tree
        would put its contents back on top of the mask.
        """
        cover = self.hidden_cover(path)
        if cover is None:
            return False
        self.overridden.append(f"{intent} {path}: inside hidden {cover} (hidden wins: not mounted)")
        return True

    def hidden_cover(self, path: str) -> str | None:
        """The first hidden path (in the policy's order) that is ``path`` or holds it."""
        if not path.startswith("/") or os.path.normpath(path) != path:
            return next((h for h in self.hidden if is_within(path, h)), None)
        found = [self._hidden_at[a] for a in ("/", *ancestors(path), path) if a in self._hidden_at]
        return self.hidden[min(found)] if found else None

    def writable_at(self, path: str) -> bool:
        """Is the host's ``path`` writable under the mounts planned so far (deepest wins)?

        Beneath the private ``/tmp`` the host's path is not there at all: it
        needs a bind of its own to be written, or seen.
        """
        return _writable_under(self._deepest_at(path), path)

    def _deepest_at(self, path: str) -> Mount | None:
        """The deepest planned mount at or above ``path``: one lookup per
        directory above it, not a pass over every mount."""
        at = path
        while True:
            found = self.mounts.get(at)
            if found is not None or at == "/":
                return found
            at = os.path.dirname(at)

    def add(self, kind: MountKind, path: str, why: str) -> None:
        # On one path the more restrictive rule wins: read-only over writable.
        old = self.mounts.get(path)
        if old is None or _RANK[old.kind] < _RANK[kind]:
            self.mounts[path] = Mount(kind, path, why)

    def pin_ancestors(self, path: str, why: str) -> None:
        """Make every writable ancestor of ``path`` a mount point (not renamable).

        Shallowest first, carrying the deepest mount seen down the chain: one
        lookup per ancestor, so a deep tree costs its depth, not its square."""
        best = self.mounts.get("/")
        for anc in ancestors(path):
            here = self.mounts.get(anc)
            if here is not None:
                best = here
                continue
            if _writable_under(best, anc):
                best = Mount("pin", anc, f"keeps {why} from being renamed away")
                self.mounts[anc] = best

    def keep_read_only(self, raw: str, why: str) -> None:
        """A protected or read-only path: existing, missing or behind a symlink."""
        path = os.path.abspath(raw)
        _refuse_too_deep(path, why)
        real = str(canonical(path))  # a path swapped back and forth meanwhile: a clean 125, not EINVAL
        if self.hidden_over(path, why) or self.hidden_over(real, why):
            return
        if real != path:
            # Some component is a symlink: protect what it points at; the link
            # itself stays replaceable (mount(2) follows a trailing symlink).
            if self.writable_at(path) and not fixed_symlink(path, os.geteuid()):
                self.degradations.append(
                    Gap(
                        SYMLINK_DEGRADATION,
                        f"{why} {path} is reached through a symlink inside a writable root: "
                        f"its target {real} is read-only, but the link can be replaced "
                        "(bwrap cannot mount over a symlink)",
                    )
                )
                self.pin_ancestors(path, path)
            self.keep_read_only(real, why)
            return
        if not self.writable_at(path):
            return  # already read-only: nothing to add
        if not absent(path):
            self.pin_ancestors(path, path)
            self.add("ro-bind", path, why)
            return
        missing = first_missing(path)
        self.pin_ancestors(missing, path)
        self.add("placeholder", missing, f"{why} {path} does not exist yet")


def _writable_under(best: Mount | None, path: str) -> bool:
    """Is ``path`` writable when ``best`` is the deepest mount at or above it?"""
    return best is not None and best.writable and not (best.kind == "private-tmp" and path != best.path)


def _refuse_too_deep(path: str, why: str) -> None:
    """A path kept read-only that lies too deep to mount: a clean refusal.

    Every writable directory above it becomes a mount point, and bwrap reads
    the whole mount table after each bind: its setup grows with the cube of
    the depth (400 levels: seconds; 1500: minutes), and past ``PATH_MAX`` the
    kernel refuses the mount.  A command can make such a tree; the next run
    says so and runs nothing, rather than stalling or failing midway."""
    levels, size = depth(path), len(os.fsencode(path))
    if levels > MAX_DEPTH or size >= _PATH_MAX:
        shown = path if len(path) <= 160 else f"{path[:80]}...{path[-60:]}"
        raise SandboxUnavailable(
            f"the {why} path {shown} lies {levels} directories deep ({size} bytes); "
            f"bwrap mounts every directory above it, and more than {MAX_DEPTH} levels (or {_PATH_MAX} bytes) "
            "would stall it for minutes; nothing ran: remove or flatten that tree, or run with another runner "
            "(--runner landlock)",
            runner="bwrap",
        )


def absent(path: str) -> bool:
    """Missing, or only a placeholder left by a sandbox that did not clean up."""
    return not os.path.lexists(path) or is_placeholder(path)


def first_missing(path: str) -> str:
    """The shallowest component of ``path`` that does not exist (or is a placeholder)."""
    for candidate in [*ancestors(path), path]:
        if absent(candidate):
            return candidate
    return path


def _roots(policy: SandboxPolicy) -> list[str]:
    if policy.mode is not SandboxMode.WORKSPACE_WRITE:
        return []
    return [str(p) for p in policy.writable_roots]


def plan_mounts(policy: SandboxPolicy) -> MountPlan:
    """The mounts (beyond ``--ro-bind / /``, ``--dev``, ``--proc``) for ``policy``."""
    intents: list[tuple[str, int, str]] = []  # (path, rank, kind of intent)
    intents += [(r, 0, "root") for r in _roots(policy)]
    intents += [(str(p), 1, "read-only") for p in policy.read_only_paths]
    intents += [(str(p), 1, "protected") for p in policy.protected_paths]
    planner = _Planner(_existing_real_paths(str(p) for p in policy.hidden_paths))
    kept = frozenset(kept_paths(policy))
    covered = _covering_masks(planner.hidden, _roots(policy), own_state.state_parents(kept), kept)
    for real in planner.hidden:
        if os.path.dirname(real) in covered:
            continue
        kind: MountKind = "mask-dir" if os.path.isdir(real) else "mask-file"
        planner.add(kind, real, "hidden")
    for parent, (count, shown) in covered.items():
        planner.add("mask-dir", parent, f"hidden: its {count} entries; what else it holds is bound again")
        for path in shown:
            planner.add("ro-bind", path, "not hidden: shown again over the mask of its directory")
    if policy.mode is SandboxMode.WORKSPACE_WRITE and policy.private_tmp is not None:
        _private_tmp(planner, policy)
    for path, _rank, intent in sorted(intents, key=lambda i: (depth(i[0]), i[1], i[0])):
        if intent == "root":
            # A root nested in another writable root is writable already; bind it
            # only when a read-only rule above it would hide that.
            if planner.hidden_over(path, "writable root"):
                continue
            if os.path.isdir(path) and not planner.writable_at(path):
                planner.add("bind", path, "writable root")
        else:
            planner.keep_read_only(path, intent)
    mounts = sorted(planner.mounts.values(), key=lambda m: (depth(m.path), _RANK[m.kind], m.path))
    return MountPlan(tuple(mounts), _dedupe(planner.degradations), tuple(dict.fromkeys(planner.overridden)))


def _existing_real_paths(paths: Iterable[str]) -> list[str]:
    """``os.path.realpath`` of each path that exists there, the directories
    holding them resolved once: the hidden paths are mostly siblings (every
    other workspace's HOME), and a full walk of each costs a ``lstat`` per
    level.  One ``lstat`` of the last component says it exists, or that it
    is a link (then the full walk)."""
    parents: dict[str, str] = {}
    out = []
    for raw in paths:
        head, name = os.path.split(raw)
        if not os.path.isabs(raw) or os.path.normpath(raw) != raw or not name:
            real = os.path.realpath(raw)  # ".." after a link is not lexical: the full walk
        else:
            if head not in parents:
                parents[head] = os.path.realpath(head)
            real = os.path.join(parents[head], name)
            try:
                if not stat.S_ISLNK(os.lstat(real).st_mode):
                    out.append(real)
                    continue
            except OSError:
                continue
            real = os.path.realpath(raw)
        if os.path.lexists(real):
            out.append(real)
    return out


def _covering_masks(
    hidden: tuple[str, ...], roots: list[str], state_parents: frozenset[str] = frozenset(),
    keep: frozenset[str] = frozenset(),
) -> dict[str, tuple[int, list[str]]]:
    """Directories most of whose entries are hidden: one mask over the
    directory, what is not hidden bound again on top (a writable root by the
    roots' rule, anything else read-only here), instead of one mask per entry:
    ``{directory: (hidden entries, entries to show read-only)}``.

    dsh-sandbox's own state hides every other workspace's HOME and every other
    session's directory: one mount each, and bwrap rereads the whole mount
    table after each one, so the setup grew with the square of the number of
    workspaces ever used.  The mask hides at least what the entries' masks
    did (an entry made after the listing too).  A directory that a writable
    root holds (new entries there are writable) or with a link in it keeps
    the masks of its entries, as does one where showing the rest would take
    more mounts than it saves.  Even one hidden entry is worth it: an entry
    removed between the listing and bwrap's mounts (another session ending)
    made bwrap fail to mount it, and the run with it.  A directory of
    ``state_parents`` is masked whatever it holds: what another session
    makes there later is hidden too; of its entries only those that are or
    hold what the run keeps (``keep``) are shown again."""
    by_parent: dict[str, int] = dict.fromkeys(state_parents, 0)
    for path in hidden:
        parent = os.path.dirname(path)
        if parent != path:
            by_parent[parent] = by_parent.get(parent, 0) + 1
    hidden_set, root_set = frozenset(hidden), frozenset(roots)
    out: dict[str, tuple[int, list[str]]] = {}
    for parent, count in by_parent.items():
        if parent == "/" or is_within(parent, TMP) or any(is_within(parent, r) for r in roots):
            continue  # (under /tmp the mount point could land in the private /tmp)
        if any(a in hidden_set for a in ("/", *ancestors(parent))):
            continue  # a hidden path above already covers it
        try:
            if os.path.realpath(parent) != parent or not os.path.isdir(parent):
                continue
            with os.scandir(parent) as entries:
                names = [e.name for e in entries]
        except OSError:
            continue
        kept = [os.path.join(parent, n) for n in names if os.path.join(parent, n) not in hidden_set]
        if any(os.path.islink(k) for k in kept):
            continue  # a link cannot be bound over (the mount would follow it)
        shown = [k for k in kept if k not in root_set or not os.path.isdir(k)]
        if parent in state_parents:
            shown = [k for k in shown if any(is_within(x, k) for x in keep)]
        if parent in state_parents or 1 + len(shown) <= count:  # the roots are bound either way
            out[parent] = (count, shown)
    return out


def _private_tmp(planner: _Planner, policy: SandboxPolicy) -> None:
    """The session's directory at ``/tmp``, and the host's repository the
    workspace lies in shown again beneath it, read-only (git must find it)."""
    if any(is_within(TMP, str(r)) for r in policy.writable_roots) or planner.hidden_over(TMP, "private /tmp"):
        return  # a root that holds /tmp is writable as the host's, searched like any root
    planner.mounts[TMP] = Mount("private-tmp", TMP, "the session's private /tmp; the host's is not visible",
                                str(policy.private_tmp))
    repo = enclosing_repository(policy.workspace)
    for path in repo.paths() if repo is not None else ():
        shown = str(path)
        if depth(shown) <= depth(TMP) or not is_within(shown, TMP):
            continue  # outside /tmp: visible (read-only) already
        if any(is_within(shown, str(r)) for r in policy.writable_roots):
            continue  # bound with its root, its git dir kept read-only by the protected paths
        if not planner.hidden_over(shown, "enclosing repository"):
            planner.add("ro-bind", shown, "the repository enclosing the workspace, read-only")


def _dedupe(items: Iterable[Gap]) -> tuple[Gap, ...]:
    return tuple(dict.fromkeys(items))
