"""Other names of protected files: links inside protected directories, second hard links.

Protection is by path, but the host's git reads an inode.  Two ways reach a
protected file's inode through a name that stays writable:

- a symbolic link inside a protected directory whose target lies in a writable
  root (``.git/hooks/pre-commit -> ../../tools/hook``, a ``.vscode`` whose
  ``tasks.json`` links into the tree): git and editors follow it;
- a second hard link (``ln .git/config cfg``, made in a run while the repository
  was new and not yet protected): writing ``cfg`` rewrites ``.git/config``.

A new hard link to a protected file cannot be made during a run where the
file is protected (bwrap and Docker bind it read-only: ``link`` across mounts
is ``EXDEV``), so the names to find are those made before.  Each protected
file with ``st_nlink > 1`` is looked for by inode in the writable roots, and
every other name found there is protected too.  The search over the roots
runs only when such a file exists: one ``lstat`` per file in the protected
directories otherwise (git's object store, refs and logs are data, skipped).
Each root has its own budget, in the order given (the workspace first): junk
in the sandbox HOME cannot use up the workspace's share, and a root whose
budget ran out is named as not searched (never taken as searched).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from dsh.sandbox.policy_paths import canonical

#: Entries looked at inside one protected directory.
_DIR_LIMIT = 2_000
#: Entries looked at in each writable root when a protected file has another hard link.
_ROOTS_LIMIT = 300_000
#: A git dir's data: what git stores, never runs (and where local clones hard-link).
_GIT_DATA = frozenset(("objects", "refs", "logs", "lfs", "rr-cache", "index", "packed-refs"))


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(r == path or r in path.parents for r in roots)


def _real(path: str | Path) -> Path:
    # Retried, then a clean refusal, when a link is swapped under realpath (EINVAL).
    return canonical(path)


def other_names(
    protected: Iterable[Path], repos: Iterable[Path], roots: Sequence[Path], incomplete: list[Path] | None = None
) -> set[Path]:
    """Paths inside ``roots`` that reach a file of ``protected`` under another
    name: link targets of links inside it, and its files' other hard links.
    Roots whose search for hard links ran out of budget are appended to
    ``incomplete``."""
    git_dirs = {str(p) for p in repos} | {str(_real(p)) for p in repos}
    out: set[Path] = set()
    multi: dict[tuple[int, int], str] = {}
    for start in protected:
        stack = [(str(start), str(start) in git_dirs)]
        budget = _DIR_LIMIT
        while stack and budget > 0:
            path, in_git = stack.pop()
            budget -= 1
            try:
                st = os.lstat(path)
            except (OSError, ValueError):
                continue
            if stat.S_ISLNK(st.st_mode):
                target = _real(path)
                if _inside(target, roots) and target not in out:
                    out.add(target)
                    stack.append((str(target), in_git))
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    multi[(st.st_dev, st.st_ino)] = path
            elif stat.S_ISDIR(st.st_mode):
                try:
                    names = os.listdir(path)
                except OSError:
                    continue
                # A git dir inside (``modules/x``, a bare one): its data is skipped too.
                inner_git = in_git or path in git_dirs or "HEAD" in names
                stack.extend((os.path.join(path, n), inner_git) for n in names
                             if not (inner_git and n in _GIT_DATA))
    if multi:
        out |= _hard_links(multi, roots, incomplete if incomplete is not None else [])
    return out


def _hard_links(wanted: dict[tuple[int, int], str], roots: Sequence[Path], incomplete: list[Path]) -> set[Path]:
    """Every name in ``roots`` of the (dev, inode) pairs of ``wanted``, but the
    known one; each root searched with its own budget, in order."""
    inodes = {ino for _dev, ino in wanted}
    known = set(wanted.values())
    out: set[Path] = set()
    seen: set[str] = set()
    for root in roots:
        budget = _ROOTS_LIMIT
        stack = [str(root)]
        while stack:
            here = stack.pop()
            if here in seen:
                continue  # a root nested in one searched before
            seen.add(here)
            try:
                with os.scandir(here) as it:
                    for entry in it:
                        budget -= 1
                        if entry.inode() in inodes and entry.path not in known:
                            try:
                                st = entry.stat(follow_symlinks=False)
                            except OSError:
                                continue
                            if (st.st_dev, st.st_ino) in wanted and stat.S_ISREG(st.st_mode):
                                out.add(Path(entry.path))
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
            except OSError:
                continue  # the main search reports what it could not list
            if budget <= 0 and stack:
                incomplete.append(root)
                break
    return out
