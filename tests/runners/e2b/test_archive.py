"""The sync-back validator on crafted archives: all-or-nothing, never outside."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from dsh.runners.e2b.archive import (
    SyncBackRefused,
    apply_sync_back,
    plan_sync_back,
)
from dsh.runners.e2b.manifest import changes, content_digest, pack, take_manifest


def tar_of(*members: tuple[str, bytes, bytes | str]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = 0o644
            if kind == tarfile.REGTYPE:
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.linkname = str(data)
                tar.addfile(info)
    buf.seek(0)
    return buf


def sync(archive: io.BytesIO, ws: Path, protected: tuple[Path, ...] = ()) -> tuple[str, ...]:
    plan = plan_sync_back(archive, ws, protected)
    apply_sync_back(archive, ws, plan)
    return plan.skipped_protected


REG = tarfile.REGTYPE


@pytest.mark.parametrize(("member", "why"), [
    (("../x", REG, b"x"), "'..' component"),
    (("a/../../x", REG, b"x"), "'..' component"),
    (("/etc/x", REG, b"x"), "absolute path"),
    (("h", tarfile.LNKTYPE, "/etc/passwd"), "is a hardlink"),
    (("f", tarfile.FIFOTYPE, ""), "is a fifo"),
    (("c", tarfile.CHRTYPE, ""), "is a character device"),
    (("b", tarfile.BLKTYPE, ""), "is a block device"),
    (("ok.txt/x", REG, b"x"), "inside a file"),
])
def test_one_bad_member_refuses_everything(workspace: Path, member: tuple[str, bytes, bytes | str],
                                           why: str) -> None:
    archive = tar_of(("./ok.txt", REG, b"ok"), ("new/dir/f", REG, b"f"), member)
    with pytest.raises(SyncBackRefused, match=why):
        sync(archive, workspace)
    assert os.listdir(workspace) == []


def test_a_new_symlink_is_left_out_and_the_rest_comes_back(workspace: Path) -> None:
    archive = tar_of(("./ok.txt", REG, b"ok"), ("etc", tarfile.SYMTYPE, "/etc"),
                     ("venv/lib64", tarfile.SYMTYPE, "lib"), ("venv/lib/m.py", REG, b"m"))
    plan = plan_sync_back(archive, workspace, ())
    apply_sync_back(archive, workspace, plan)
    assert plan.skipped_links == ("etc", "venv/lib64")
    assert (workspace / "ok.txt").read_bytes() == b"ok" and (workspace / "venv/lib/m.py").read_bytes() == b"m"
    assert not os.path.lexists(workspace / "etc") and not os.path.lexists(workspace / "venv/lib64")


def test_a_member_below_a_new_symlink_is_refused(workspace: Path) -> None:
    archive = tar_of(("ok.txt", REG, b"ok"), ("etc", tarfile.SYMTYPE, "/etc"), ("etc/passwd", REG, b"x"))
    with pytest.raises(SyncBackRefused, match="inside a file"):
        sync(archive, workspace)
    assert os.listdir(workspace) == []


def test_same_name_as_file_and_directory_is_refused(workspace: Path) -> None:
    archive = tar_of(("d", tarfile.DIRTYPE, b""), ("d", REG, b"x"))
    with pytest.raises(SyncBackRefused, match="both file and directory"):
        sync(archive, workspace)


def test_destination_kinds_on_the_host_are_checked(workspace: Path, tmp_path: Path) -> None:
    (workspace / "dir").mkdir()
    (workspace / "file").write_text("f")
    for member, why in ((("dir", REG, b"x"), "not a regular file on the host"),
                        (("file/x", REG, b"x"), "not a directory on the host")):
        with pytest.raises(SyncBackRefused, match=why):
            sync(tar_of(("ok", REG, b"ok"), member), workspace)
    assert sorted(os.listdir(workspace)) == ["dir", "file"]


def test_valid_archive_applies_atomically_with_modes(workspace: Path) -> None:
    (workspace / "same.txt").write_text("same")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in (("same.txt", b"same", 0o644), ("tool", b"#!", 0o4755),
                                 ("a/b/c.txt", b"c", 0o600)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1_000_000
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    plan = plan_sync_back(buf, workspace, ())
    assert [u.parts for u in plan.updates] == [("tool",), ("a", "b", "c.txt")]
    apply_sync_back(buf, workspace, plan)
    assert (workspace / "tool").stat().st_mode & 0o7777 == 0o755  # no setuid from the sandbox
    assert (workspace / "a/b/c.txt").read_text() == "c"
    assert (workspace / "a/b/c.txt").stat().st_mtime == 1_000_000
    assert not [p for p in workspace.rglob("*dsh-sync*")]


def test_protected_paths_are_skipped_and_reported(workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git/HEAD").write_text("ref")
    archive = tar_of((".git/HEAD", REG, b"ref"), (".git/config", REG, b"evil"),
                     ("x/.dsh/p", REG, b"p"), (".env", REG, b"E"), ("ok", REG, b"ok"))
    skipped = sync(archive, workspace, protected=(workspace / ".env",))
    assert sorted(skipped) == [".env", ".git/config", "x/.dsh/p"]  # unchanged HEAD is not news
    assert sorted(os.listdir(workspace)) == [".git", "ok"]
    assert os.listdir(workspace / ".git") == ["HEAD"]


def test_trusted_names_and_nested_repositories_never_come_back(workspace: Path) -> None:
    """A repository or a config a later host action runs, made in the sandbox at
    any depth, stays there."""
    archive = tar_of(("a/b/.git/hooks/post-checkout", REG, b"#!/bin/sh"), ("a/b/.git/config", REG, b"x"),
                     (".vscode/tasks.json", REG, b"{}"), ("pkg/.envrc", REG, b"x"), ("pkg/ok.py", REG, b"x"))
    skipped = sync(archive, workspace)
    assert sorted(skipped) == [".vscode/tasks.json", "a/b/.git/config", "a/b/.git/hooks/post-checkout",
                               "pkg/.envrc"]
    assert not (workspace / ".vscode").exists() and not (workspace / "a" / "b" / ".git").exists()
    assert (workspace / "pkg" / "ok.py").read_text() == "x" and not (workspace / "pkg" / ".envrc").exists()


def test_failure_while_staging_rolls_back(workspace: Path) -> None:
    archive = tar_of(("new/a", REG, b"a"), ("b", REG, b"b"))
    plan = plan_sync_back(archive, workspace, ())
    (workspace / "b").mkdir()  # appears between planning and applying
    (workspace / "b/keep").write_text("k")
    with pytest.raises(SyncBackRefused, match="no longer a regular file"):
        apply_sync_back(archive, workspace, plan)
    assert sorted(os.listdir(workspace)) == ["b"]
    assert os.listdir(workspace / "b") == ["keep"]


def test_failure_while_renaming_puts_everything_back(workspace: Path) -> None:
    from dsh.runners.e2b.archive import _commit, _DirCache

    for name in ("a", "b"):
        (workspace / name).write_text(f"old {name}")
        (workspace / f".{name}.tmp").write_text(f"new {name}")
    os.unlink(workspace / ".b.tmp")  # the second rename fails after the first succeeded
    dirs = _DirCache(workspace)
    staged: list[tuple[tuple[str, ...], str | None, str]] = [((), ".a.tmp", "a"), ((), ".b.tmp", "b")]
    try:
        with pytest.raises(FileNotFoundError):
            _commit(dirs, staged)
    finally:
        dirs.close()
    assert (workspace / "a").read_text() == "old a"
    assert (workspace / "b").read_text() == "old b"
    assert (workspace / ".a.tmp").read_text() == "new a"  # left for the caller to unlink
    assert sorted(os.listdir(workspace)) == [".a.tmp", "a", "b"]


def test_not_a_tar_is_refused(workspace: Path) -> None:
    with pytest.raises(SyncBackRefused, match="not a valid tar"):
        sync(io.BytesIO(b"\x00" * 100 + b"garbage"), workspace)


def test_manifest_and_pack_skip_sockets_fifos_and_hidden(workspace: Path) -> None:
    import socket

    (workspace / "f").write_text("f")
    os.link(workspace / "f", workspace / "f2")
    os.mkfifo(workspace / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(workspace / "sock"))
    (workspace / "hide").mkdir()
    (workspace / "hide/x").write_text("x")
    os.symlink("f", workspace / "l")
    try:
        manifest = take_manifest(workspace, exclude=(workspace / "hide",))
    finally:
        sock.close()
    assert sorted(manifest) == ["f", "f2", "l"]
    buf = io.BytesIO()
    pack(workspace, manifest, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("f2").read() == b"f"  # type: ignore[union-attr]
    assert sorted(members) == ["f", "f2", "l"]
    assert members["f2"].isreg()  # a hardlink goes as a copy
    assert members["f"].uid == 0 and members["f"].uname == ""


def test_changes_between_manifests(workspace: Path) -> None:
    (workspace / "keep").write_text("k")
    (workspace / "edit").write_text("1")
    (workspace / "gone").write_text("g")
    (workspace / "becomes-dir").write_text("f")
    old = take_manifest(workspace)
    (workspace / "edit").write_text("22")
    (workspace / "gone").unlink()
    (workspace / "becomes-dir").unlink()
    (workspace / "becomes-dir").mkdir()
    (workspace / "new").write_text("n")
    send, remove = changes(old, take_manifest(workspace))
    assert send == ["becomes-dir", "edit", "new"]
    assert remove == ["becomes-dir", "gone"]


def test_files_the_command_did_not_touch_leave_the_host_alone(workspace: Path) -> None:
    (workspace / "a").write_text("newer on the host")
    archive = tar_of(("a", REG, b"as synced"), ("b", REG, b"changed in the sandbox"))
    synced = {"a": content_digest(io.BytesIO(b"as synced"), False),
              "b": content_digest(io.BytesIO(b"old b"), False)}
    plan = plan_sync_back(archive, workspace, (), None, synced)
    assert [u.parts for u in plan.updates] == [("b",)]
    apply_sync_back(archive, workspace, plan)
    assert (workspace / "a").read_text() == "newer on the host"


def test_deletions_only_for_files_the_host_did_not_touch(workspace: Path) -> None:
    for name in ("deleted", "host-edited", ".git", "kept"):
        (workspace / name).write_text(name)
    previous = take_manifest(workspace)
    (workspace / "host-edited").write_text("newer on the host")
    archive = tar_of(("kept", REG, b"kept"))  # the sandbox deleted the other three
    plan = plan_sync_back(archive, workspace, (), previous)
    assert plan.deletions == (("deleted",),)
    assert plan.skipped_protected == (".git",)
    apply_sync_back(archive, workspace, plan)
    assert sorted(os.listdir(workspace)) == [".git", "host-edited", "kept"]


GIT_MEMBERS = (
    ("r/.git/objects/ab/cdef", REG, b"obj"), ("r/.git/refs/heads/main", REG, b"sha\n"),
    ("r/.git/index", REG, b"idx"), ("r/.git/logs/HEAD", REG, b"log"),
    ("r/.git/hooks/pre-commit", REG, b"#!/bin/sh\n"), ("r/.git/config", REG, b"[core]\n"),
    ("r/.git/info/attributes", REG, b"* filter=x\n"), ("r/.git/modules/m/config", REG, b"[core]\n"),
    ("r/.git/objects/x/.git/config", REG, b"[core]\n"), ("s/.git", REG, b"gitdir: /elsewhere\n"),
)


@pytest.mark.parametrize("git_commit", [False, True])
def test_a_commits_files_come_back_only_under_git_commit(workspace: Path, git_commit: bool) -> None:
    """``git = "commit"``: objects, refs, the index and logs come back; hooks,
    config, info, nested repositories and a ``.git`` file never do."""
    archive = tar_of(*GIT_MEMBERS)
    plan = plan_sync_back(archive, workspace, (), git_commit=git_commit)
    apply_sync_back(archive, workspace, plan)
    committed = {"r/.git/objects/ab/cdef", "r/.git/refs/heads/main", "r/.git/index", "r/.git/logs/HEAD"}
    control = {name for name, _kind, _data in GIT_MEMBERS} - committed
    assert set(plan.skipped_protected) == (control if git_commit else control | committed)
    for name in control:
        assert not (workspace / name).exists(), name
    for name in committed:
        assert (workspace / name).exists() is git_commit, name
