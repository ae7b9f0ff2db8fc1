"""The e2b runner reads the workspace for upload, and writes it back, through
the fd the policy service pinned: a workspace swapped for a symlink after
the policy was resolved sends and receives nothing outside it."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from dsh.runners.e2b.archive import FileUpdate, SyncPlan, apply_sync_back
from dsh.runners.e2b.manifest import pack, take_manifest
from dsh.sandbox.pins import walk


def _swap_for_link(ws: Path, outside: Path) -> Path:
    """Move the workspace aside and put a link to ``outside`` at its name."""
    moved = ws.with_name("moved")
    os.rename(ws, moved)
    ws.symlink_to(outside)
    return moved


def test_upload_and_sync_back_go_through_the_pinned_workspace(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "a.txt").write_text("inside")
    (outside / "a.txt").write_text("SECRET from outside")
    pin = walk("workspace", str(ws), ws).pin
    assert pin is not None
    try:
        moved = _swap_for_link(ws, outside)
        manifest = take_manifest(ws, root_fd=pin.fd)
        assert set(manifest) == {"a.txt"} and manifest["a.txt"].size == len("inside")
        buf = io.BytesIO()
        pack(ws, ["a.txt"], buf, root_fd=pin.fd)
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            member = tar.extractfile("a.txt")
            assert member is not None and member.read() == b"inside"
        # Sync-back: the command's new file lands in the pinned directory.
        data = b"written in the sandbox"
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo("b.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            plan = SyncPlan(updates=(FileUpdate(("b.txt",), tar.getmember("b.txt")),), skipped_protected=())
        apply_sync_back(archive, ws, plan, root_fd=pin.fd)
        assert (moved / "b.txt").read_bytes() == data
        assert sorted(os.listdir(outside)) == ["a.txt"]
    finally:
        os.close(pin.fd)
