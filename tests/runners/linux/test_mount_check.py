"""``mount_check``: what a sandbox really mounted, judged from the host.

A real bwrap is stopped at ``--block-fd`` (after its mounts, before its
command) and its mount table is checked against expectations that hold and
against ones that do not: a bind that went elsewhere, another inode, a
writable mount where a read-only one belongs, a symlink on the way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dsh.runners.linux.mount_check import ExpectedMount, mount_problem, mount_table

from tests.support.wait import wait_until

BWRAP = shutil.which("bwrap")


@dataclass
class Blocked:
    pid: int  # the sandbox's pid 1 (host pid)
    ws: Path
    ro: Path
    other: Path
    decoy: Path  # the workspace is bound here too: a bind made on a decoy


def _identity(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


@pytest.fixture
def blocked(tmp_path: Path) -> Iterator[Blocked]:
    if BWRAP is None:
        pytest.skip("SANDBOX_UNAVAILABLE: bwrap is not installed")
    base = tmp_path.resolve()
    ws, ro, other, decoy = base / "ws", base / "ro", base / "other", base / "decoy"
    for d in (ws, ro, other, decoy):
        d.mkdir()
    (ws / "link").symlink_to(other)
    block_r, block_w = os.pipe()
    info_r, info_w = os.pipe()
    proc = subprocess.Popen(
        [BWRAP, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--bind", str(ws), str(ws),
         "--ro-bind", str(ro), str(ro), "--bind", str(ws), str(decoy), "--tmpfs", str(other), "--info-fd", str(info_w),
         "--block-fd", str(block_r), "--", "true"],
        pass_fds=(block_r, info_w),
    )
    os.close(info_w)
    try:
        info = b""
        while b"child-pid" not in info or b"}" not in info:
            chunk = os.read(info_r, 4096)
            if not chunk:
                pytest.fail(f"bwrap reported no pid: {info!r}")
            info += chunk
        pid = int(info.split(b'"child-pid":')[1].split(b",")[0].split(b"}")[0])
        # Blocked once its mount table holds the last mount of the plan.
        wait_until(lambda: any(e.point == str(other) for e in _table(pid)), what="bwrap's mounts")
        yield Blocked(pid, ws, ro, other, decoy)
    finally:
        os.close(block_r)
        os.write(block_w, b"x")
        os.close(block_w)
        os.close(info_r)
        proc.wait(timeout=60)


def _table(pid: int) -> list:  # type: ignore[type-arg]
    try:
        with open(f"/proc/{pid}/mountinfo") as fh:
            return mount_table(fh.read())
    except OSError:
        return []


def test_the_planned_mounts_pass(blocked: Blocked) -> None:
    assert mount_problem(blocked.pid, [
        ExpectedMount(str(blocked.ws), _identity(blocked.ws)),
        ExpectedMount(str(blocked.ro), _identity(blocked.ro), read_only=True),
        ExpectedMount(str(blocked.other), fstype="tmpfs"),
    ]) is None


def test_a_path_without_its_mount_is_refused(blocked: Blocked) -> None:
    # What a bind sent elsewhere by a swapped-in link leaves: its own path
    # shows the read-only root, not a mount of its own.
    elsewhere = blocked.ws.parent
    problem = mount_problem(blocked.pid, [ExpectedMount(str(elsewhere), _identity(elsewhere))])
    assert problem is not None and "not mounted at its own path" in problem


def test_another_inode_at_the_path_is_refused(blocked: Blocked) -> None:
    problem = mount_problem(blocked.pid, [ExpectedMount(str(blocked.ws), _identity(blocked.ro))])
    assert problem is not None and "another directory" in problem


def test_a_writable_mount_where_a_read_only_one_belongs_is_refused(blocked: Blocked) -> None:
    problem = mount_problem(blocked.pid, [ExpectedMount(str(blocked.ws), _identity(blocked.ws), read_only=True)])
    assert problem is not None and "must be read-only" in problem


def test_the_wrong_filesystem_type_is_refused(blocked: Blocked) -> None:
    problem = mount_problem(blocked.pid, [ExpectedMount(str(blocked.ro), fstype="tmpfs")])
    assert problem is not None and "tmpfs" in problem


def test_a_symlink_on_the_way_is_refused(blocked: Blocked) -> None:
    problem = mount_problem(blocked.pid, [ExpectedMount(str(blocked.ws / "link"), _identity(blocked.other))])
    assert problem is not None and "without a symlink" in problem


def test_a_bind_made_on_a_decoy_shows_on_the_host(blocked: Blocked) -> None:
    """In the sandbox a bind made on a decoy directory (one the host exchanged
    in and out while bwrap mounted by name) looks right: the pinned inode, at
    the path.  On the host nothing is mounted there, and the decoy shows."""
    fooled = ExpectedMount(str(blocked.decoy), _identity(blocked.ws))
    assert mount_problem(blocked.pid, [fooled]) is None
    problem = mount_problem(blocked.pid, [ExpectedMount(str(blocked.decoy), _identity(blocked.ws), onto_itself=True)])
    assert problem is not None and "another directory on the host" in problem
    assert mount_problem(blocked.pid, [ExpectedMount(str(blocked.ws), _identity(blocked.ws), onto_itself=True)]) is None


def test_a_sandbox_that_is_gone_is_refused() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    problem = mount_problem(proc.pid, [ExpectedMount("/")])
    assert problem is not None and "cannot be read" in problem


def test_the_table_parser_reads_escapes_and_flags() -> None:
    line = r"36 35 98:0 /mnt\040dir /a\040b ro,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue"
    (entry,) = mount_table(line + "\nnot a mount line\n")
    assert (entry.mount_id, entry.device, entry.root, entry.point) == (36, "98:0", "/mnt dir", "/a b")
    assert entry.read_only and entry.fstype == "ext3"


@pytest.mark.parametrize("odd", ["\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "\x0b", "\x0c"])
def test_a_name_with_what_python_calls_whitespace_is_one_field(odd: str) -> None:
    # The kernel escapes only space, tab, newline and backslash: anything
    # else a name holds is in the line as it is.
    point = f"/w/a{odd}b/.git"
    line = f"36 35 98:0 {point} {point} ro,relatime shared:2 - ext4 /dev/root rw"
    (entry,) = mount_table(line + "\n" + line.replace("36 35", "37 35").replace(point, "/x") + "\n")[:1]
    assert entry.point == point and entry.root == point and entry.fstype == "ext4"
    assert [e.point for e in mount_table(line + "\n" + line)] == [point, point]
