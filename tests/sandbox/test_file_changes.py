"""What a run changed under the writable roots, judged from two snapshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.sandbox.file_changes import LISTED, FileChanges, compare, snapshot


def test_created_modified_deleted_and_renamed(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("Makefile", "keep", "gone", "sub/old"):
        (tmp_path / name).write_text("x")
    before = snapshot([tmp_path])
    assert compare(before, snapshot([tmp_path])).clean
    (tmp_path / "Makefile").write_text("y")  # same size
    (tmp_path / "gone").unlink()
    (tmp_path / "new").write_text("")
    os.rename(tmp_path / "sub" / "old", tmp_path / "sub" / "moved")
    changes = compare(before, snapshot([tmp_path]))
    assert changes.modified == (str(tmp_path / "Makefile"),)
    assert changes.created == (str(tmp_path / "new"), str(tmp_path / "sub" / "moved"))
    assert changes.deleted == (str(tmp_path / "gone"), str(tmp_path / "sub" / "old"))
    assert changes.total == 5 and not changes.clean


def test_a_rewrite_with_the_old_size_and_mtime_is_seen(tmp_path: Path) -> None:
    """The command can put mtime back; the kernel's ctime it cannot."""
    target = tmp_path / "Makefile"
    target.write_text("all:\n\ttrue\n")
    st = target.stat()
    before = snapshot([tmp_path])
    target.write_text("all:\n\tfals\n")  # same length
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    assert compare(before, snapshot([tmp_path])).modified == (str(target),)


def test_swapped_in_by_rename_and_chmod_are_seen(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("1")
    before = snapshot([tmp_path])
    os.rename(tmp_path / "b", tmp_path / "a")  # same content, another inode
    (tmp_path / "dir").mkdir()
    mid = snapshot([tmp_path])
    changes = compare(before, mid)
    assert str(tmp_path / "a") in changes.modified and str(tmp_path / "b") in changes.deleted
    (tmp_path / "dir").chmod(0o700)
    assert compare(mid, snapshot([tmp_path])).modified == (str(tmp_path / "dir"),)


def test_symlinks_are_not_followed_and_nested_roots_walked_once(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "inner").mkdir(parents=True)
    (root / "link").symlink_to(outside)
    snap = snapshot([root, root / "inner"])
    assert str(root / "link") in snap.entries and not any(p.startswith(str(outside)) for p in snap.entries)
    before = snap
    (outside / "f").write_text("x")  # not under a root
    (root / "inner" / "g").write_text("x")
    changes = compare(before, snapshot([root, root / "inner"]))
    assert changes.created == (str(root / "inner" / "g"),)


def test_too_many_entries_is_not_clean(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"f{i}").write_text("")
    before = snapshot([tmp_path], max_entries=10)
    changes = compare(before, snapshot([tmp_path], max_entries=10))
    assert changes.total == 0 and not changes.clean
    assert "more than 10 entries" in changes.incomplete[0]


def test_a_directory_that_cannot_be_listed_is_not_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "locked").mkdir()
    real = os.scandir

    def scandir(path: str):  # type: ignore[no-untyped-def]
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    snap = snapshot([tmp_path])
    assert snap.incomplete and "locked: cannot list" in snap.incomplete[0]
    assert not compare(snap, snap).clean


def test_the_lists_are_bounded_and_the_count_exact(tmp_path: Path) -> None:
    before = snapshot([tmp_path])
    for i in range(LISTED + 7):
        (tmp_path / f"f{i:03}").write_text("")
    changes = compare(before, snapshot([tmp_path]))
    assert len(changes.created) == LISTED and changes.total == LISTED + 7
    assert FileChanges.unknown("not watched").incomplete == ("not watched",)


def test_a_directory_nobody_here_can_search_holds_nothing_to_tell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's private directory in a shared /tmp: neither the walk nor
    the command (the same user) can reach inside, and a chmod shows on it."""
    (tmp_path / "private").mkdir()
    real_scandir, real_access = os.scandir, os.access

    def scandir(path: str):  # type: ignore[no-untyped-def]
        if str(path).endswith("private"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    def access(path: str, mode: int, **kw: object) -> bool:
        return False if str(path).endswith("private") else real_access(path, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "access", access)
    owner = (tmp_path / "private").stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # another user's
    before = snapshot([tmp_path])
    assert not before.incomplete and str(tmp_path / "private") in before.entries
    (tmp_path / "private").chmod(0o777)
    assert compare(before, snapshot([tmp_path])).modified == (str(tmp_path / "private"),)


def test_a_directory_of_ours_shut_with_chmod_000_is_not_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our own directory we cannot list (mode 000, as nobody: root lists
    anything, hence the stand-in for the refusal): the command, running as us,
    can chmod it open, change what it holds and chmod it shut again, leaving
    its own entry as it was.  What it holds is not known, before and after."""
    (tmp_path / "h").mkdir()
    real_scandir, real_access = os.scandir, os.access

    def scandir(path: str):  # type: ignore[no-untyped-def]
        if str(path).endswith("/h"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    def access(path: str, mode: int, **kw: object) -> bool:
        return False if str(path).endswith("/h") else real_access(path, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "access", access)
    before, after = snapshot([tmp_path]), snapshot([tmp_path])
    assert before.incomplete == (f"{tmp_path / 'h'}: cannot list (Permission denied)",)
    changes = compare(before, after)
    assert changes.total == 0 and not changes.clean  # nothing seen is not "unchanged"
