"""The snapshot of the live filesystem a mount plan is computed from.

``gather_facts(policy, uid)`` looks once at every path ``mount_plan`` will ask
about (each kept, hidden or writable path, every directory above it, where a
symlink on the way leads) and at the entries of the directories whose
entries are mostly hidden; the planner then reads nothing else, so its rules
are tested on synthetic ``MountFacts``.

Looking is the cost of every run: one run hides every other workspace's
sandbox HOME (hundreds of siblings on a long-used machine).  So a path's
canonical form is its parent's plus its own name unless it is a symlink
(one ``lstat``, not a ``realpath`` walk of every level), and the hidden
paths' parents are listed once.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dsh.sandbox.enclosing_repo import enclosing_repository, vouched_git_dirs
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.own_state import state_parents
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import canonical, fixed_symlink, path_within, system_dir_reason
from dsh.sandbox.tree_cache import RACY_NS

PathKind = Literal["dir", "file", "symlink", "other", "missing", "placeholder"]

#: Where a runner with a mount namespace shows the session's private temporary directory.
TMP = "/tmp"

#: Mode that marks an empty directory as a dsh placeholder (nobody may write in it).
PLACEHOLDER_MODE = 0o555


def depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def ancestors(path: str) -> list[str]:
    """Strict ancestors of an absolute path, shallowest first (``/`` excluded)."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


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
    #: The entry names of each directory holding hidden paths that one mask
    #: over the whole directory could serve (a canonical directory outside
    #: the roots and ``/tmp``); the facts of its other entries are in ``paths``.
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Hidden paths the mask of their state directory hides (``masked_by_state``):
    #: no fact is taken of them, and no mask of their own is planned.
    state_hidden: frozenset[str] = frozenset()

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


def is_placeholder(path: str) -> bool:
    """An empty directory with the placeholder mode (left by a sandbox)."""
    return _placeholder_at(path) is True


def _placeholder_at(path: str) -> bool | None:
    """Is the directory at ``path`` a placeholder?  Its mode and its entries
    are read from one open of it: looked up twice by name, a directory
    exchanged with a link in between gave one answer of two inodes.  None
    when no directory is there (any more)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return stat.S_IMODE(os.fstat(fd).st_mode) == PLACEHOLDER_MODE and not os.listdir(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def hidden_per_directory(hidden: Iterable[str]) -> dict[str, int]:
    """How many of the canonical ``hidden`` paths each directory holds directly."""
    counts: dict[str, int] = {}
    for path in hidden:
        parent = os.path.dirname(path)
        if parent != path:
            counts[parent] = counts.get(parent, 0) + 1
    return counts


def one_mask_pays(hidden: int, shown: int) -> bool:
    """One mask over a directory with ``hidden`` hidden entries, and the
    ``shown`` entries bound again on top of it, are no more mounts than a
    mask per hidden entry."""
    return 1 + shown <= hidden


#: How many times a path that changes between two looks is looked at again.
_LOOKS = 3


def path_fact(path: str, uid: int | None, parent_real: str | None = None) -> PathFact:
    """``path`` as it is now.  ``parent_real``: its directory's canonical
    form, when known: then only a symlink here needs a full resolve.
    ``uid``: the command's, ``None`` when unknown (then no link is fixed)."""
    for _ in range(_LOOKS):
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            # A link swapped back and forth meanwhile: a clean refusal, not EINVAL.
            return PathFact("symlink", str(canonical(path)), uid is not None and fixed_symlink(path, uid))
        if parent_real is None or path == "/":
            real = str(canonical(path))
        else:
            real = os.path.join(parent_real, os.path.basename(path))
        if st is None:
            return PathFact("missing", real)
        if not stat.S_ISDIR(st.st_mode):
            return PathFact("file" if stat.S_ISREG(st.st_mode) else "other", real)
        placeholder = _placeholder_at(path)
        if placeholder is not None:
            return PathFact("placeholder" if placeholder else "dir", real)
        # Gone between the two looks (a directory on the way exchanged with a link):
        # look again, and never take for the user's own directory what was not seen as one.
    return PathFact("missing", real)


def _facts_of(wanted: Iterable[str], uid: int | None, into: dict[str, PathFact]) -> None:
    """Facts of every path in ``wanted`` and of each directory above it,
    shallowest first, so each path's canonical form builds on its parent's."""
    todo: set[str] = set()
    for path in wanted:
        if path not in into:
            todo.add(path)
            todo.update(a for a in ancestors(path) if a not in into)
    for path in sorted(todo, key=depth):
        parent = into.get(os.path.dirname(path))
        into[path] = path_fact(path, uid, parent.real if parent is not None else None)


def _enclosing(workspace: Path) -> tuple[tuple[Path, ...], bool]:
    """What of the repository the workspace lies in must be visible (its work
    tree strictly above the workspace and its git dirs outside it; or, for a
    workspace that is a repository's top, its git dirs elsewhere), and whether
    that work tree is the home directory or a system directory (a dotfiles
    repository would show all of ``~``)."""
    repo = enclosing_repository(workspace)
    if repo is not None:
        return repo.paths(), system_dir_reason(repo.top) is not None
    return tuple(vouched_git_dirs(workspace / ".git", workspace)), False


def kept_paths(policy: SandboxPolicy) -> list[str]:
    """What of dsh-sandbox's state a run keeps: its roots, its HOME, its private /tmp."""
    return [str(p) for p in (*policy.writable_roots, policy.home, policy.private_tmp) if p is not None]


def plan_roots(policy: SandboxPolicy) -> list[str]:
    """The roots the plan binds writable (danger-full-access: the workspace too)."""
    if policy.mode is SandboxMode.READ_ONLY:
        return []
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        return [str(p) for p in dict.fromkeys((policy.workspace, *policy.writable_roots))]
    return [str(p) for p in policy.writable_roots]


def gather_facts(policy: SandboxPolicy, uid: int | None) -> MountFacts:
    """Everything ``plan_mounts`` will ask about ``policy``'s paths, as it is now.

    ``uid`` is the command's: a symlink it cannot replace is no gap
    (``None``, unknown: every symlink it could reach is one).
    """
    paths: dict[str, PathFact] = {}
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
    _facts_of(wanted, uid, paths)
    # A hidden path inside a state directory masked whole needs no fact: the
    # mask hides it (one per workspace this user ever ran in, under the HOMEs).
    covered = masked_by_state(policy, paths, parents, enclosing)
    state_hidden = frozenset(h for h in map(str, policy.hidden_paths) if covered(h))
    hidden = [h for h in map(str, policy.hidden_paths) if h not in state_hidden]
    named = [os.path.abspath(raw) for raw in (*map(str, policy.protected_paths), *map(str, policy.read_only_paths),
                                              *hidden)]
    _facts_of(named, uid, paths)
    # Where a link on the way leads: that path and the directories above it.
    _facts_of((paths[p].real for p in named if paths[p].real != p), uid, paths)
    listings = _listings(policy, paths, frozenset(parents), state_hidden) if policy.constrained else {}
    _facts_of((os.path.join(d, n) for d, names in listings.items() for n in names), uid, paths)
    return MountFacts(paths, enclosing, system, parents, listings, state_hidden)


def masked_by_state(policy: SandboxPolicy, paths: Mapping[str, PathFact], parents: Iterable[str],
                    enclosing: Iterable[str] = ()) -> Callable[[str], bool]:
    """Is a hidden path (canonical) hidden by the mask of a state directory
    alone?  It must lie directly in a directory whose fact says it is one,
    reached through no link, inside a state directory masked whole (one
    reached through no link, not beneath a private ``/tmp``, where there is
    nothing to mask), and not be a link itself (a swap since the policy was
    resolved is then looked at as any hidden path is: refused); and neither
    lie in nor hold anything the run keeps, binds or shows (its workspace,
    roots, HOME and private /tmp, the repository enclosing it, a protected or
    read-only path): what is bound or shown comes back over the state
    directory's mask, and a runner that shows only some paths (a container)
    leaves out a mask beyond them; the hidden path's own mask, or hidden
    winning over what lies in it, is then what keeps it out.  The
    state directories hold one entry per workspace this user ever ran in."""
    private = policy.mode is SandboxMode.WORKSPACE_WRITE and policy.private_tmp is not None
    masks = tuple(m for m in parents if (fact := paths.get(m)) is not None and fact.kind == "dir"
                  and fact.real == m and not (private and path_within(m, TMP)))
    if not masks:
        return lambda path: False
    # Prefix tests in C: this runs for every hidden path of every command.
    inside = tuple(m.rstrip("/") + "/" for m in masks)
    mask_set = frozenset(masks)
    shown = [*kept_paths(policy), str(policy.workspace), *enclosing,
             *map(str, policy.protected_paths), *map(str, policy.read_only_paths)]
    around = frozenset(a for p in shown for a in (p, *ancestors(p)))
    inside_shown = tuple(p.rstrip("/") + "/" for p in shown)

    link_free: dict[str, bool] = {}

    def covered(path: str) -> bool:
        if path in around or path.startswith(inside_shown):
            return False
        parent = os.path.dirname(path)
        fact = paths.get(parent)
        if fact is None or fact.kind != "dir" or fact.real != parent:
            return False
        if not (parent in mask_set or parent.startswith(inside)):
            return False
        if parent not in link_free:
            link_free[parent] = holds_no_link(parent)
        if link_free[parent]:
            return True  # one look at the directory for all its entries
        try:
            return not stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            return True  # gone: nothing there to show

    return covered


#: Directory -> ((device, inode, ctime) just before it was listed, whether
#: none of its entries was a symbolic link then).
_LINK_FREE: dict[str, tuple[tuple[int, int, int], bool]] = {}


def holds_no_link(directory: str) -> bool:
    """Whether no entry of ``directory`` is a symbolic link: one listing
    instead of an ``lstat`` of each of its entries (a state directory holds
    one per workspace ever used).  A listing is reused while the directory's
    device, inode and ctime are those seen just before it was made: an entry
    made, removed or renamed in it since sets its ctime, which nothing
    unprivileged sets back.  One changed in the last ``RACY_NS`` is listed
    again each time (a change in the same clock tick as the listing could
    leave its ctime as it was)."""
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    stamp = (st.st_dev, st.st_ino, st.st_ctime_ns)
    known = _LINK_FREE.get(directory)
    if known is not None and known[0] == stamp:
        return known[1]
    try:
        with os.scandir(directory) as entries:
            answer = not any(entry.is_symlink() for entry in entries)
    except OSError:
        return False
    if st.st_ctime_ns < time.time_ns() - RACY_NS:
        if len(_LINK_FREE) > 64:
            _LINK_FREE.clear()
        _LINK_FREE[directory] = (stamp, answer)
    return answer


def _listings(policy: SandboxPolicy, paths: Mapping[str, PathFact], masked: frozenset[str],
              state_hidden: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """The entries of each canonical directory that holds hidden paths, outside
    ``/tmp``, the roots and the state directories (``masked`` whole anyway):
    where one mask over it could serve them all."""
    roots = [str(r) for r in policy.writable_roots]
    reals = (paths[os.path.abspath(p)].real for p in map(str, policy.hidden_paths) if p not in state_hidden)
    hidden = {real for real in reals if paths[real].kind != "missing"}
    out: dict[str, tuple[str, ...]] = {}
    for parent, count in hidden_per_directory(hidden).items():
        if parent in masked or parent == "/" or path_within(parent, TMP):
            continue
        if any(path_within(parent, r) for r in roots) or any(a in hidden for a in ("/", *ancestors(parent))):
            continue
        fact = paths.get(parent)
        if fact is None or fact.kind != "dir" or fact.real != parent:
            continue
        try:
            with os.scandir(parent) as entries:
                names = tuple(e.name for e in entries)
        except OSError:
            continue
        # A directory where one mask cannot pay even if every root there is
        # a directory (bound anyway) is not looked into further.
        others = sum(1 for n in names if os.path.join(parent, n) not in hidden)
        held_roots = sum(1 for r in roots if os.path.dirname(r) == parent)
        if one_mask_pays(count, others - held_roots):
            out[parent] = names
    return out
