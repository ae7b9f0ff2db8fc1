"""What the daemon made in a directory it bound by mistake is taken back: only
what was born after the container started, only if still empty, and what stays
is named.  Driven with the real filesystem and mount table; the container's
view (its mount table and inodes) is written out as the daemon would show it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dsh.runners.docker.spec import ContainerSpec, MountSpec
from dsh.runners.docker.strays import after_failed_start, take_back
from dsh.runners.linux.mount_check import mount_table


def _host_mounts() -> str:
    return Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="surrogateescape")


def _bound_line(directory: Path, at: str) -> str:
    """A container mount-table line binding host ``directory`` at ``at``."""
    host = mount_table(_host_mounts())
    holder = max((m for m in host if directory == Path(m.point) or Path(m.point) in directory.parents),
                 key=lambda m: len(m.point))
    inner = Path(holder.root) / directory.relative_to(holder.point)
    return f"900 1 {holder.device} {inner} {at} rw - ext4 /dev/x rw"


def _spec(ws: str, *mounts: MountSpec) -> ContainerSpec:
    return ContainerSpec(image="i", user="0", mounts=(MountSpec(ws, "bind", False, ws), *mounts),
                         network_mode="none", read_only_root=True, pids_limit=None, mem_limit=None,
                         fsize_limit=None)


def test_only_what_was_born_since_and_is_empty_goes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "old").mkdir()  # there before the container started
    time.sleep(0.1)
    since = time.time()
    (outside / "made").mkdir()  # what runc made as mount points
    (outside / "a" / "b").mkdir(parents=True)
    (outside / "token").touch()
    (outside / "busy").mkdir()
    (outside / "busy" / "file").write_text("x")  # not empty: a command's, or the host's
    empty_file = tmp_path / "empty"
    empty_file.touch()
    spec = _spec(str(ws),
                 MountSpec(str(ws / "old"), "tmpfs", True),
                 MountSpec(str(ws / "made"), "tmpfs", True),
                 MountSpec(str(ws / "a" / "b"), "tmpfs", True),
                 MountSpec(str(ws / "token"), "bind", True, str(empty_file)),
                 MountSpec(str(ws / "busy"), "tmpfs", True))
    want = (os.stat(ws).st_dev, os.stat(ws).st_ino)
    seen = (os.stat(outside).st_dev, os.stat(outside).st_ino)
    left = take_back(spec, {str(ws): want}, since, container_mounts=_bound_line(outside, str(ws)),
                     container_identity=lambda target: seen if target == str(ws) else None,
                     host_mounts=_host_mounts())
    assert sorted(os.listdir(outside)) == ["busy", "old"]
    assert left == [str(outside / "busy")]


def test_a_container_that_bound_the_pinned_directory_is_left_alone(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "made").mkdir(parents=True)
    since = time.time() - 1
    spec = _spec(str(ws), MountSpec(str(ws / "made"), "tmpfs", True))
    want = (os.stat(ws).st_dev, os.stat(ws).st_ino)
    left = take_back(spec, {str(ws): want}, since, container_mounts=_bound_line(ws, str(ws)),
                     container_identity=lambda target: want, host_mounts=_host_mounts())
    assert left == [] and (ws / "made").is_dir()


def test_a_bound_directory_that_cannot_be_found_is_named(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = _spec(str(ws), MountSpec(str(ws / "made"), "tmpfs", True))
    want = (os.stat(ws).st_dev, os.stat(ws).st_ino)
    gone = tmp_path / "gone"  # renamed or removed since: no host path holds that inode
    left = take_back(spec, {str(ws): want}, time.time(), container_mounts=_bound_line(tmp_path, str(ws)).replace(
        str(tmp_path), str(gone), 1), container_identity=lambda target: (want[0], want[1] + 1),
        host_mounts=_host_mounts())
    assert len(left) == 1 and str(ws) in left[0] and "could not be found" in left[0]


def test_a_directory_two_mount_points_share_goes_once_both_are_gone(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    since = time.time()
    (outside / "a" / "b").mkdir(parents=True)
    (outside / "a" / "c").mkdir()
    spec = _spec(str(ws), MountSpec(str(ws / "a" / "b"), "tmpfs", True), MountSpec(str(ws / "a" / "c"), "tmpfs", True))
    want = (os.stat(ws).st_dev, os.stat(ws).st_ino)
    seen = (os.stat(outside).st_dev, os.stat(outside).st_ino)
    left = take_back(spec, {str(ws): want}, since, container_mounts=_bound_line(outside, str(ws)),
                     container_identity=lambda target: seen, host_mounts=_host_mounts())
    assert left == [] and os.listdir(outside) == []


def test_after_a_failed_start_what_runc_made_where_the_name_leads_now_goes(tmp_path: Path) -> None:
    """A start that failed leaves no container to ask: the workspace's name,
    still a link to another directory, leads to what runc made there."""
    ws = tmp_path / "ws"
    ws.mkdir()
    want = (os.stat(ws).st_dev, os.stat(ws).st_ino)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "old").mkdir()  # there before the start
    time.sleep(0.1)
    since = time.time()
    (outside / ".dsh").mkdir()  # runc's mount point, made before the start failed
    (outside / "busy").mkdir()
    (outside / "busy" / "file").write_text("x")
    ws.rename(tmp_path / "ws.real")
    ws.symlink_to(outside)
    spec = _spec(str(ws), MountSpec(str(ws / ".dsh"), "bind", True, str(tmp_path)),
                 MountSpec(str(ws / "old"), "tmpfs", True), MountSpec(str(ws / "busy"), "tmpfs", True))
    notes = after_failed_start(spec, {str(ws): want}, since)
    assert sorted(os.listdir(outside)) == ["busy", "old"]
    assert notes == [str(outside / "busy")]


def test_after_a_failed_start_a_workspace_renamed_meanwhile_is_named(tmp_path: Path) -> None:
    """Swapped and swapped back: where its name led cannot be known, so the
    refusal says what the daemon may have made; an untouched one says nothing."""
    ws = tmp_path / "ws"
    ws.mkdir()
    want = (os.stat(ws).st_dev, os.stat(ws).st_ino)
    spec = _spec(str(ws), MountSpec(str(ws / ".dsh"), "bind", True, str(tmp_path)))
    time.sleep(0.1)
    assert after_failed_start(spec, {str(ws): want}, time.time()) == []
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "vlink").symlink_to(outside)
    (tmp_path / "other").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / ".dsh").mkdir()  # there before the start
    time.sleep(0.1)
    since = time.time()
    ws.rename(tmp_path / "aside")  # exchanged with vlink and back, as renameat2 does
    (tmp_path / "aside").rename(ws)
    (outside / ".dsh").mkdir()  # runc's mount point, where vlink leads
    notes = after_failed_start(spec, {str(ws): want}, since)
    assert len(notes) == 1 and f"{ws} was renamed" in notes[0] and "(.dsh)" in notes[0]
    assert os.listdir(outside) == [], "what runc made where the link beside it leads stayed"
    assert os.listdir(tmp_path / "elsewhere") == [".dsh"], "born before the start: not runc's"
    assert after_failed_start(_spec(str(ws)), {str(ws): want}, since) == [], "no nested mount: nothing to make"
