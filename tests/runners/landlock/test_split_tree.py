"""Landlock grants read per entry around what a run hides: ``split_tree``
covers a tree minus its exclusions, exactly, however many there are (a run
hides every other workspace's sandbox HOME: hundreds of siblings)."""

from __future__ import annotations

from pathlib import Path

from dsh.runners.landlock.rules import split_tree


def test_the_tree_minus_the_exclusions_is_covered_exactly(tmp_path: Path) -> None:
    for rel in ("a/b/c", "a/b/keep", "a/d", "e", "f/g"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "e")
    granted, ancestors = split_tree(tmp_path, [tmp_path / "a" / "b" / "c", tmp_path / "e"])
    assert sorted(granted) == sorted(tmp_path / rel for rel in ("a/b/keep", "a/d", "f", "file"))
    assert sorted(ancestors) == sorted([tmp_path, tmp_path / "a", tmp_path / "a" / "b"])
    # The root itself excluded, or beneath an exclusion: nothing at all.
    assert split_tree(tmp_path / "e", [tmp_path / "e"]) == ([], [])
    assert split_tree(tmp_path / "a" / "b", [tmp_path / "a"]) == ([], [])
    # Nothing excluded beneath: the root whole (an exclusion elsewhere is not its business).
    assert split_tree(tmp_path / "f", [tmp_path / "e", tmp_path / "fx"]) == ([tmp_path / "f"], [])


def test_thousands_of_hidden_siblings(tmp_path: Path) -> None:
    homes = tmp_path / "home"
    for index in range(3000):
        (homes / f"ws-{index:04d}").mkdir(parents=True)
    hidden = [homes / f"ws-{index:04d}" for index in range(3000) if index != 1234]
    granted, ancestors = split_tree(tmp_path, hidden)
    assert granted == [homes / "ws-1234"]
    assert ancestors == [tmp_path, homes]
