"""What a run created, modified or deleted under the writable roots.

Before a denied run may be re-run under a wider mode, whoever approves must
know what the denied run left behind: a ``Makefile`` it rewrote is what the
approved ``make`` would run.  A snapshot records every entry under the roots
as (device, inode, mode, owner, size, mtime, ctime); comparing the snapshot
taken before a run with one taken after it names every change.  ctime is set
by the kernel on every write, rename, chmod or utime and cannot be set back by
the command, so a file rewritten with its old size and mtime is still seen.

``protected_scan.TreeIndex`` cannot serve here: it caches a directory's
listing by the directory's ctime, which a file rewritten in place does not
touch, and it keeps no file at all, so it cannot say what was deleted.  This
walk is bounded instead (``max_entries``), and what it cannot see (a root
with too many entries, a directory it cannot list) makes the result
``incomplete``: callers treat "could not tell" as "changed".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: Entries a snapshot walks, over all roots, before it gives up: about 0.2 s
#: each way on a warm cache.
DEFAULT_MAX_ENTRIES = 100_000
#: Paths kept per kind of change (the counts stay exact): a report, not an inventory.
LISTED = 50

_Stat = tuple[int, int, int, int, int, int, int, int]


@dataclass(frozen=True)
class TreeSnapshot:
    """Every entry under ``roots`` at one moment; ``incomplete`` names what was not seen."""

    roots: tuple[str, ...]
    entries: Mapping[str, _Stat] = field(default_factory=dict)
    incomplete: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileChanges:
    """What changed between two snapshots, bounded for prompts and logs.

    ``incomplete`` says where the comparison could not tell (too many entries,
    an unlistable directory, no snapshot before the run): not "unchanged"."""

    created: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    total: int = 0  # every change, also those past the lists' bound
    incomplete: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Nothing changed, and that is known."""
        return self.total == 0 and not self.incomplete

    @classmethod
    def unknown(cls, why: str) -> FileChanges:
        return cls(incomplete=(why,))

    def lines(self, limit: int = 20) -> list[tuple[str, str]]:
        """(kind, path) pairs, at most ``limit``: modified first (an input the
        re-run will read, rewritten), then deleted, then created."""
        pairs = [
            *(("modified", p) for p in self.modified),
            *(("deleted", p) for p in self.deleted),
            *(("created", p) for p in self.created),
        ]
        return pairs[:limit]


def _stat_key(st: os.stat_result) -> _Stat:
    if stat.S_ISDIR(st.st_mode):
        # A directory's size and times change with its entries, which are
        # compared one by one: only the directory itself being replaced,
        # chmod-ed or chown-ed is a change of its own.
        return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, 0, 0, 0)
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def snapshot(roots: Iterable[Path | str], max_entries: int = DEFAULT_MAX_ENTRIES) -> TreeSnapshot:
    """Every entry at or under ``roots`` (no symlink followed, roots nested in
    roots walked once), up to ``max_entries`` in all."""
    tops = tuple(dict.fromkeys(str(r) for r in roots))
    entries: dict[str, _Stat] = {}
    incomplete: list[str] = []
    budget = max_entries
    walked: set[str] = set()
    for top in tops:
        try:
            st = os.lstat(top)
        except FileNotFoundError:
            continue  # a missing root holds nothing (and is not writable: roots are not created)
        except OSError as exc:
            incomplete.append(f"{top}: {exc.strerror or exc}")
            continue
        entries[top] = _stat_key(st)
        if not stat.S_ISDIR(st.st_mode):
            continue
        stack = [top]
        while stack:
            here = stack.pop()
            if here in walked:
                continue
            walked.add(here)
            try:
                with os.scandir(here) as it:
                    for entry in it:
                        budget -= 1
                        if budget < 0:
                            incomplete.append(f"{top}: more than {max_entries} entries under the writable roots")
                            return TreeSnapshot(tops, entries, tuple(incomplete))
                        try:
                            est = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue  # gone between the listing and the stat: the other snapshot tells
                        except OSError as exc:
                            incomplete.append(f"{entry.path}: {exc.strerror or exc}")
                            continue
                        entries[entry.path] = _stat_key(est)
                        if stat.S_ISDIR(est.st_mode):
                            stack.append(entry.path)
            except FileNotFoundError:
                continue
            except PermissionError as exc:
                # A directory we own the command (the same user) can chmod open,
                # change what it holds, and chmod shut again: its own entry
                # keeps no trace of that (a directory's ctime is not compared),
                # so what it holds is not known.  One we could search but not
                # list may be changed through names we cannot see.  Only other
                # users' private directories (a shared /tmp has them) hold
                # nothing the command can reach.
                if _reachable_by_us(here):
                    incomplete.append(f"{here}: cannot list ({exc.strerror or exc})")
            except OSError as exc:
                # Never "empty": what it holds may have changed unseen.
                incomplete.append(f"{here}: cannot list ({exc.strerror or exc})")
    return TreeSnapshot(tops, entries, tuple(incomplete))


def _reachable_by_us(directory: str) -> bool:
    """Could a command running as us reach what ``directory`` holds, now or
    after a chmod?"""
    try:
        st = os.lstat(directory)
    except OSError:
        return True  # cannot tell: not known
    if st.st_uid == os.geteuid():
        return True
    return os.access(directory, os.X_OK, effective_ids=os.access in os.supports_effective_ids)


def compare(before: TreeSnapshot, after: TreeSnapshot) -> FileChanges:
    """What changed from ``before`` to ``after`` (taken of the same roots)."""
    old, new = before.entries, after.entries
    created = sorted(new.keys() - old.keys())
    deleted = sorted(old.keys() - new.keys())
    modified = sorted(p for p in old.keys() & new.keys() if old[p] != new[p])
    incomplete = tuple(dict.fromkeys((*before.incomplete, *after.incomplete)))
    if before.roots != after.roots:
        incomplete += ("the snapshots are of different roots",)
    return FileChanges(
        created=tuple(created[:LISTED]),
        modified=tuple(modified[:LISTED]),
        deleted=tuple(deleted[:LISTED]),
        total=len(created) + len(modified) + len(deleted),
        incomplete=incomplete[:LISTED],
    )
