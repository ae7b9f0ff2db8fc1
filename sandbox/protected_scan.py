"""Files a later host action trusts, found at any depth under the writable roots.

A sandboxed command may write anywhere in a writable root, but some files there
are run or trusted later by the host: a git repository's hooks and config (run
by the user's next ``git status``), shell start-up files, editor, agent and
cloud-tool configuration.  This module finds them so that

- the policy service keeps the ones that exist read-only (``protected_paths``),
  in every repository at any depth, not just at the root of the workspace; and
- after a run, the host reports the ones the command created or changed
  (``trusted_changes``): a ``git init`` or a planted ``.vscode/tasks.json`` is
  allowed, but never goes unnoticed.

Walking a big tree for every command would be slow, so ``TreeIndex`` remembers
each directory's listing with its inode and ctime: a directory whose entries
changed has a new ctime (which a command cannot set back), and only those are
listed again.  A refresh of an unchanged tree costs one ``lstat`` per directory.
The walk is bounded; a root it could not finish, or a directory it could not
list, is reported as a gap in the search, never taken for empty.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from dsh.sandbox import tree_cache
from dsh.sandbox.git_config import host_entries, host_missing_dirs, host_named_paths, programs_named_in_config
from dsh.sandbox.policy_paths import canonical, git_dirs, read_small_file
from dsh.sandbox.protected_links import other_names
from dsh.sandbox.tree_cache import RACY_NS

GitAccess = Literal["read-only", "commit"]
GIT_ACCESS: tuple[GitAccess, ...] = ("read-only", "commit")

def __getattr__(name: str) -> tuple[str, ...]:
    """``DEFAULT_PROTECTED_NAMES``: names whose content the host or the user's
    tools run or trust later, kept read-only wherever they exist under a
    writable root and reported when a run creates or changes them.  They are
    data (``protected_names.json``, each with the tool that reads it and what
    it runs), read when first asked for."""
    if name == "DEFAULT_PROTECTED_NAMES":
        from dsh.sandbox.protected_names import default_protected_names

        return default_protected_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: The parts of a git dir that git runs or trusts: hooks and config (which
#: names ``core.fsmonitor``, ``core.hooksPath``, ``core.sshCommand``, aliases,
#: filters, ``diff.external``), ``info`` (attributes pick filters), nested
#: repositories (``modules``, ``worktrees``), the links that move the common
#: dir or the config elsewhere, legacy remotes, and the scripts of a rebase or
#: sequencer in progress (``exec`` lines run on ``--continue``).
GIT_CONTROL_PARTS: tuple[str, ...] = (
    "hooks", "config", "config.worktree", "info", "modules", "worktrees", "commondir",
    "gitdir", "remotes", "branches", "rebase-merge", "rebase-apply", "sequencer",
)  # fmt: skip

#: Control parts kept read-only under ``commit`` even before they exist (an
#: empty read-only placeholder): git reads an empty ``hooks`` directory as "no
#: hooks", an empty ``info``, ``modules``, ``worktrees``, ``remotes`` or
#: ``branches`` as none of them, and never reads ``gitdir`` in a repository's
#: own git dir.  Not ``commondir`` nor ``config.worktree`` (git dies on a
#: directory there), nor the rebase and sequencer states (an empty one reads as
#: an operation in progress): creating those is reported after the run.
_KEPT_WHEN_MISSING = frozenset({"hooks", "info", "modules", "worktrees", "remotes", "branches", "gitdir"})

#: The work a walk may do before a root is given up as too big: each entry
#: listed costs one, each directory whose listing still holds costs two (its
#: ``lstat``).  About 2.5 s for a million entries listed cold; a tree whose
#: listings were kept by an earlier run (``keep``) costs a fraction of that.
DEFAULT_MAX_ENTRIES = 1_200_000
#: What a directory whose listing still holds costs against the bound.
_HELD_COST = 2


@dataclass(frozen=True)
class Found:
    """The trusted entries under some roots, as they are now."""

    repos: tuple[Path, ...]  # every ``.git`` entry (directory, file or link), every bare-looking git dir
    named: tuple[Path, ...]  # every entry with a protected name
    #: Where the search stopped: a root whose walk hit the entry bound, or a
    #: directory we could not list (unreadable, or a path too long to open).
    incomplete: tuple[Path, ...]
    #: (path, inode) of every repository and named entry: one renamed or
    #: swapped into place is new even where no ctime under it changed.
    identity: tuple[tuple[Path, int], ...] = ()
    #: The roots searched (at any depth and directly inside).
    roots: tuple[Path, ...] = ()
    #: Symbolic links found in the roots searched at any depth, and the roots
    #: searched only directly inside (the sandbox HOME, its private ``/tmp``).
    links: tuple[Path, ...] = ()
    shallow: tuple[Path, ...] = ()


class _Listing(NamedTuple):
    """One directory as listed.  A named tuple, not a dataclass: a big tree has
    hundreds of thousands, read from the kept file and written back whole."""

    key: tuple[int, int, int]  # (st_dev, st_ino, st_ctime_ns) when listed
    subdirs: tuple[str, ...]
    repos: tuple[tuple[str, int], ...]  # (name, inode)
    named: tuple[tuple[str, int], ...]
    entries: int
    git_dir: bool  # git would run it as a (bare) repository: see ``_is_git_dir``
    links: tuple[str, ...] = ()  # symbolic links


#: The entries git looks at to take a directory for a git dir when it is run
#: inside it (a bare repository needs no ``.git``: ``safe.bareRepository`` is
#: ``all`` by default).
_GIT_DIR_NAMES = frozenset(("HEAD", "objects", "refs", "commondir"))
#: A listing we could not make: the directory is a gap in the search.
_UNLISTABLE: Literal["unlistable"] = "unlistable"


def _is_git_dir(marks: set[str]) -> bool:
    """Git's own test: a HEAD, and objects and refs either here or in the
    directory a ``commondir`` file names (a worktree's git dir).  Looser than
    git (HEAD's content is not checked): a false match only protects more."""
    return "HEAD" in marks and ({"objects", "refs"} <= marks or "commondir" in marks)


def _key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class TreeIndex:
    """Listings of the directories under some roots, refreshed where they changed."""

    def __init__(self, names: Iterable[str], max_entries: int = DEFAULT_MAX_ENTRIES, *, keep: bool = False) -> None:
        """``keep``: the listings of the roots searched at any depth are read
        from, and kept in, dsh-sandbox's own cache (``tree_cache``) for the
        next process."""
        self.names = frozenset(names) - {".git"}
        # Directories whose listing may hold a ``parent/name`` entry.
        self._parents = frozenset(n.split("/", 1)[0] for n in self.names if "/" in n)
        self.max_entries = max_entries
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()
        self._keep = keep
        self._loaded: set[str] = set()
        # Entries listed under each root since its listings were loaded or kept.
        self._listed: dict[str, int] = {}
        self._kept_rows: dict[str, int] = {}  # how many listings of each root the cache holds
        self._names_key = tree_cache.names_key(self.names) if keep else ""

    def refresh(self, roots: Sequence[Path], shallow: Sequence[Path] = ()) -> Found:
        """What is under ``roots`` at any depth, and directly inside ``shallow``."""
        repos: list[tuple[Path, int]] = []
        named: list[tuple[Path, int]] = []
        incomplete: list[Path] = []
        links: list[Path] = []
        with self._lock:
            seen: set[str] = set()
            for root in roots:
                if self._keep and str(root) not in self._loaded:
                    self._load(str(root))
                self._walk(str(root), repos, named, seen, incomplete, links)
            for root in shallow:
                listing = self._listing(str(root))
                seen.add(str(root))
                if isinstance(listing, str):
                    incomplete.append(root)
                elif listing is not None:
                    repos.extend([(root, listing.key[1])] if listing.git_dir else [])
                    repos.extend((root / n, ino) for n, ino in listing.repos)
                    named.extend((root / n, ino) for n, ino in listing.named)
            # Forget directories that are gone (bounded memory over a long session).
            for gone in self._listings.keys() - seen:
                del self._listings[gone]
        identity = tuple(sorted(set(repos) | set(named)))
        return Found(
            tuple(sorted({p for p, _ in repos})),
            tuple(sorted({p for p, _ in named})),
            tuple(dict.fromkeys(incomplete)),
            identity,
            tuple(dict.fromkeys([*roots, *shallow])),
            tuple(links),
            tuple(shallow),
        )

    def _walk(
        self,
        root: str,
        repos: list[tuple[Path, int]],
        named: list[tuple[Path, int]],
        seen: set[str],
        incomplete: list[Path],
        links: list[Path],
    ) -> None:
        budget = self.max_entries
        stack = [root]
        listings, lstat, is_dir = self._listings, os.lstat, stat.S_ISDIR
        while stack:
            path = stack.pop()
            if path in seen:
                continue  # a root nested in another root
            seen.add(path)
            held = listings.get(path)
            listing: _Listing | None = None
            if held is not None:
                # What ``_listing`` does first, inline: this runs once per
                # directory of every search, and most did not change.
                try:
                    st = lstat(path)
                except OSError:
                    pass
                else:
                    if held.key == (st.st_dev, st.st_ino, st.st_ctime_ns) and is_dir(st.st_mode):
                        listing = held
                        budget -= _HELD_COST
            if listing is None:
                fresh = self._listing(path)
                if isinstance(fresh, str):
                    # Never "empty": a repository could be hiding in there.
                    incomplete.append(Path(path))
                    continue
                if fresh is None:
                    continue
                if fresh is not held:  # listed now, not reused
                    budget -= fresh.entries
                    self._listed[root] = self._listed.get(root, 0) + fresh.entries
                else:
                    budget -= _HELD_COST
                listing = fresh
            if budget < 0:
                incomplete.append(Path(root))
                return
            key, subdirs, found_repos, found_named, _entries, git_dir, found_links = listing
            if git_dir:
                repos.append((Path(path), key[1]))  # its hooks and config are not walked into
                continue
            # Tested before they are walked: most directories have none.
            if found_repos:
                repos.extend((Path(path, n), ino) for n, ino in found_repos)
            if found_named:
                named.extend((Path(path, n), ino) for n, ino in found_named)
            if found_links:
                links.extend(Path(path, n) for n in found_links)
            if subdirs:
                prefix = path if path.endswith("/") else path + "/"
                stack.extend([prefix + n for n in subdirs])

    def _listing(self, path: str) -> _Listing | Literal["unlistable"] | None:
        """``path``'s listing; ``None`` when it is gone or not a directory."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None  # gone meanwhile
        except OSError:
            return _UNLISTABLE  # too long a path, or a parent we cannot search
        if not stat.S_ISDIR(st.st_mode):
            return None
        cached = self._listings.get(path)
        if cached is not None and cached.key == _key(st):
            return cached
        # Changed so lately that a change in the same clock tick, after the
        # listing, could leave the ctime as it is: listed again next time.
        racy = st.st_ctime_ns > time.time_ns() - RACY_NS
        subdirs: list[str] = []
        links: list[str] = []
        repos: list[tuple[str, int]] = []
        named: list[tuple[str, int]] = []
        marks: set[str] = set()
        entries = 0
        parent = os.path.basename(path) + "/" if os.path.basename(path) in self._parents else None
        try:
            with os.scandir(path) as it:
                for entry in it:
                    entries += 1
                    if entry.name in _GIT_DIR_NAMES:
                        marks.add(entry.name)
                    if entry.name == ".git":
                        repos.append((entry.name, entry.inode()))  # never walked into: protected or reported whole
                    elif entry.name in self.names or (parent and parent + entry.name in self.names):
                        named.append((entry.name, entry.inode()))
                    elif entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                    elif entry.is_symlink():
                        links.append(entry.name)
        except FileNotFoundError:
            return None
        except OSError:
            return _UNLISTABLE  # unreadable to us: nor can we protect what it holds
        listing = _Listing(_key(st), tuple(subdirs), tuple(repos), tuple(named), entries, _is_git_dir(marks),
                           tuple(links))
        if racy:
            self._listings.pop(path, None)
        else:
            self._listings[path] = listing
        return listing

    # -- kept between processes -----------------------------------------------------------
    def _load(self, root: str) -> None:
        """The listings an earlier process kept for ``root`` (each is checked
        against its directory's identity and ctime before it is used)."""
        self._loaded.add(root)
        rows = tree_cache.load(root, self._names_key)
        try:
            kept = {path: _Listing._make(row) for path, row in rows.items() if path not in self._listings}
        except TypeError:
            kept = {}  # not what this version writes: listed afresh
        self._listings.update(kept)
        self._kept_rows[root] = len(rows)
        self._listed.pop(root, None)

    def save(self) -> None:
        """Keep the listings of the roots searched at any depth, on the local
        filesystems (``tree_cache``), for the next process: when none are kept
        yet, or when what was listed since would cost a run more than a
        twentieth of writing them all (a run that touches a few directories
        leaves the file as it is: those few are listed again)."""
        if not self._keep:
            return
        with self._lock:
            due = [root for root, listed in self._listed.items()
                   if not self._kept_rows.get(root) or listed * 20 >= self._kept_rows[root]]
            if not due:
                return
            local = tree_cache.local_devices()
            for root in due:
                under = root.rstrip("/") + "/"
                rows = {path: listing for path, listing in self._listings.items()
                        if (path == root or path.startswith(under)) and listing.key[0] in local}
                tree_cache.save(root, self._names_key, rows)
                self._kept_rows[root] = len(rows)
                self._listed.pop(root)


# -- what to keep read-only -----------------------------------------------------------
def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def git_dirs_of(dot_git: Path) -> list[Path]:
    """The git dir(s) behind a ``.git`` entry: itself, or where a ``.git`` file
    points; and the common dir its ``commondir`` names, where git reads the
    config and hooks (a worktree's own git dir has one; so may a ``.git`` a
    command wrote, naming a directory it moves into place later)."""
    if _is_real_dir(dot_git):
        common = (read_small_file(dot_git / "commondir") or "").strip()
        return [dot_git, canonical(common.splitlines()[0], dot_git)] if common else [dot_git]
    out = [canonical(dot_git)] if os.path.isdir(dot_git) else []
    return out + git_dirs(dot_git)


def protected_in_repo(dot_git: Path, access: GitAccess) -> set[Path]:
    """What stays read-only in one repository (``dot_git`` is its ``.git`` entry).

    ``read-only``: the whole git dir(s).  ``commit``: the ``.git`` entry itself
    when it is a file or a link, and the existing control parts of each git
    dir; objects, refs, logs, the index, ``packed-refs``, the HEAD files,
    the messages and their ``*.lock`` files stay writable (what ``git add``,
    ``commit``, ``merge`` and ``fetch`` write).  ``hooks`` is kept even when
    missing (an empty read-only placeholder: git runs nothing from it); any
    other control part that does not exist yet is not held open (git would
    read an empty placeholder as a broken repository or a rebase in
    progress): creating one is reported after the run instead.
    """
    # Found by a walk that follows no symlink under a canonical root: a real
    # directory's path is canonical already.
    real_dir = _is_real_dir(dot_git)
    targets = git_dirs_of(dot_git)
    if access == "read-only":
        return {dot_git, *targets} if real_dir else {dot_git, canonical(dot_git), *targets}
    # The git directory itself stays writable (lock files, renames over HEAD).
    out: set[Path] = set() if real_dir else {dot_git, canonical(dot_git)}
    for git_dir in targets:
        exists = _is_real_dir(git_dir)
        for part in GIT_CONTROL_PARTS:
            if (exists and part in _KEPT_WHEN_MISSING) or os.path.lexists(git_dir / part):
                out.add(git_dir / part)
    return out


def protected_from(
    found: Found, access: GitAccess, roots: Sequence[Path] = (), incomplete: list[Path] | None = None
) -> set[Path]:
    """Every path to keep read-only for what ``refresh`` found.

    A directory laid out as a git dir that is, or holds, a writable root (a
    workspace made to look like a bare repository) cannot be read-only as a
    whole without making the root read-only: its control parts are.  (A
    ``.git`` file or link pointing at an ancestor of a root keeps failing
    closed: the policy service refuses a root inside a protected path.)
    """
    out: set[Path] = set()
    host = host_entries()  # the user's and the system's git config: once for every repository
    named_by_config: set[Path] = {p for p in host_named_paths(roots, host) if os.path.lexists(p)}
    # A hooks directory a host-wide config names by absolute path, not made yet:
    # an empty read-only placeholder (git reads it as "no hooks").
    named_by_config |= host_missing_dirs(roots, host)
    for dot_git in found.repos:
        holds_root = dot_git.name != ".git" and any(r == dot_git or dot_git in r.parents for r in roots)
        out |= protected_in_repo(dot_git, "commit" if holds_root else access)
        named_by_config |= programs_named_in_config(dot_git, git_dirs_of(dot_git), roots, host)
    # A config value naming ``.`` or a root's directory must not make a root read-only.
    out |= {p for p in named_by_config if not any(r == p or p in r.parents for r in roots)}
    for path in found.named:
        out.add(path)
        if os.path.islink(path):
            out.add(canonical(path))
    # The same files through other names: a link inside a protected directory
    # (``.git/hooks/pre-commit -> ../../tools/hook``), a second hard link.
    others = other_names(out, found.repos, roots, incomplete)
    out |= {p for p in others if not any(r == p or p in r.parents for r in roots)}
    return out
