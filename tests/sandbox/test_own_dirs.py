"""dsh-sandbox's own directories (private /tmp, sandbox HOMEs, spill, the
runner-order hint) when an earlier run planted ``$XDG_CACHE_HOME/dsh-sandbox``
as a link to a directory of its choosing: the host makes, chmods, writes and
removes nothing there.  Judged on the real filesystem, from the host."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dsh.executors.spill import SpillDir
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.own_dirs import open_own_dir, remove_tree
from dsh.sandbox.private_tmp import PrivateTmp
from dsh.sandbox.sandbox_home import ensure_private_dir, workspace_home

pytestmark = pytest.mark.usefixtures("no_tmpdir")


@dataclass(frozen=True)
class Planted:
    cache: Path  # $XDG_CACHE_HOME, where a command could write
    target: Path  # where the planted link points: what the attacker wants touched
    env: dict[str, str]

    def untouched(self) -> None:
        """The target as the attacker left it: a 1777 ``tmp`` with a victim's
        session in it, nothing added, nothing chmodded or removed."""
        assert sorted(p.name for p in self.target.iterdir()) == ["tmp"]
        assert stat.S_IMODE(os.stat(self.target / "tmp").st_mode) == 0o1777
        assert sorted(p.name for p in (self.target / "tmp").iterdir()) == ["session-victim"]
        assert (self.target / "tmp" / "session-victim" / "work").read_text() == "keep"


@pytest.fixture
def planted() -> Iterator[Planted]:
    # Under /var/tmp: outside /tmp (a writable root of every run), like a real cache.
    base = Path(tempfile.mkdtemp(prefix="dsh-own-dirs-", dir="/var/tmp")).resolve()
    cache, target = base / "cache", base / "target"
    cache.mkdir()
    (target / "tmp" / "session-victim").mkdir(parents=True)
    (target / "tmp" / "session-victim" / "work").write_text("keep")
    os.chmod(target / "tmp", 0o1777)
    old = 1_000_000_000
    os.utime(target / "tmp" / "session-victim", (old, old))
    (cache / "dsh-sandbox").symlink_to(target)
    try:
        yield Planted(cache, target, {"XDG_CACHE_HOME": str(cache), "HOME": str(base / "home")})
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_private_tmp_never_goes_through_the_planted_link(
    planted: Planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsh.sandbox.private_tmp as module

    real_time = module.time.time
    # Every session there looks long dead: the prune would remove the victim's.
    monkeypatch.setattr(module.time, "time", lambda: real_time() + 3600)
    made = PrivateTmp.create([], planted.env)
    try:
        assert not made.path.is_relative_to(planted.target) and not made.path.is_relative_to(planted.cache)
        planted.untouched()
    finally:
        made.close()
    planted.untouched()


def test_the_sandbox_home_is_refused_through_the_planted_link(
    planted: Planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(planted.cache))
    with pytest.raises(ConfigError, match="symlink"):
        ensure_private_dir(workspace_home(Path("/work/project")), "home")
    planted.untouched()


def test_spill_never_goes_through_the_planted_link(planted: Planted) -> None:
    spill = SpillDir([], planted.env)
    try:
        assert not spill.path.is_relative_to(planted.target) and not spill.path.is_relative_to(planted.cache)
    finally:
        spill.close(remove=True)
    planted.untouched()


def test_the_runner_order_hint_is_not_written_through_the_planted_link(
    planted: Planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh.sandbox import registry

    monkeypatch.setenv("XDG_CACHE_HOME", str(planted.cache))
    points = registry.runner_entry_points()
    registry.write_priorities(points, dict.fromkeys(points))
    planted.untouched()
    assert registry.read_priorities(points) is None
    # Through a real directory it is written (the hint works at all).
    (planted.cache / "dsh-sandbox").unlink()
    registry.write_priorities(points, dict.fromkeys(points))
    assert registry.read_priorities(points) == dict.fromkeys(points)
    assert stat.S_IMODE(os.stat(planted.cache / "dsh-sandbox").st_mode) == 0o700


def test_a_fifo_as_the_hint_does_not_hang_the_reader(planted: Planted, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh.sandbox import registry

    (planted.cache / "dsh-sandbox").unlink()
    (planted.cache / "dsh-sandbox").mkdir()
    os.mkfifo(planted.cache / "dsh-sandbox" / "auto-order.json")
    monkeypatch.setenv("XDG_CACHE_HOME", str(planted.cache))
    assert registry.read_priorities(registry.runner_entry_points()) is None


def test_an_existing_directory_of_ours_is_narrowed_by_fd_and_another_users_refused(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    own = open_own_dir(mine, "test", "fix it")
    own.close()
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 12345, 12345)
        with pytest.raises(ConfigError, match="belongs to uid 12345"):
            open_own_dir(theirs, "test", "fix it")
        assert stat.S_IMODE(os.stat(theirs).st_mode) == 0o755


def test_remove_tree_unlinks_links_and_never_follows_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "link").symlink_to(outside)
    (tree / "dirlink").symlink_to(outside)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree(fd, "tree")
    finally:
        os.close(fd)
    assert not tree.exists() and (outside / "keep").read_text() == "x"


def _deep_tree(fd: int, levels: int) -> None:
    """``tree/d/d/...`` under ``fd``, a file at each level, made by fd (the path would pass PATH_MAX)."""
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.mkdir("tree", dir_fd=here)
    for level in range(levels):
        nested = os.open("tree" if level == 0 else "d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
        os.close(here)
        here = nested
        os.mkdir("d", dir_fd=here)
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here))
    os.close(here)


def test_remove_tree_empties_a_tree_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """A command can nest directories in its private /tmp far deeper than
    Python's recursion limit; removing them must neither raise nor stop
    halfway (a leftover session made every later run fail while pruning)."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _deep_tree(fd, 3000)
        remove_tree(fd, "tree")
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_remove_tree_holds_one_directory_open_at_a_time(tmp_path: Path) -> None:
    """A tree deeper than the descriptors a login session allows (1,024) is
    removed all the same: here 600 levels under a limit of 128."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        _deep_tree(fd, 600)
        held = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(128, held + 32), hard))
        try:
            remove_tree(fd, "tree")
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    finally:
        os.close(fd)
    assert not (tmp_path / "tree").exists()


def test_remove_tree_stops_when_the_tree_moved_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Going back up, ``..`` must be the directory it left: a subtree moved
    elsewhere meanwhile stops the removal, and what now lies above is kept."""
    from dsh.sandbox import own_dirs

    (tmp_path / "tree" / "a" / "b").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep").write_text("x")
    real = own_dirs._unlink_files

    def unlink_then_move(fd: int) -> list[str]:
        found = real(fd)
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == "b":
            os.rename(tmp_path / "tree" / "a", tmp_path / "elsewhere" / "a")
        return found

    monkeypatch.setattr(own_dirs, "_unlink_files", unlink_then_move)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError, match="moved while it was being removed"):
            remove_tree(fd, "tree")
    finally:
        os.close(fd)
    assert (tmp_path / "elsewhere" / "keep").read_text() == "x"


def test_the_escalation_log_is_not_written_through_a_planted_link(
    planted: Planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh.sandbox.approval import DenyAllApproval, EscalationDecision, EscalationRequest
    from dsh.sandbox.context import Context
    from dsh.sandbox.modes import SandboxMode

    # $DSH_HOME (the log's directory) names the planted link.
    monkeypatch.setenv("DSH_HOME", str(planted.cache / "dsh-sandbox"))
    request = EscalationRequest("make install", "/work", SandboxMode.WORKSPACE_WRITE,
                                SandboxMode.DANGER_FULL_ACCESS, "needs it", "bash", "a")
    decision = DenyAllApproval(Context()).approve_escalation(request)
    assert isinstance(decision, EscalationDecision) and not decision.approved
    planted.untouched()
    # Through a real directory it is written, 0600 in a 0700 directory made for it.
    monkeypatch.setenv("DSH_HOME", str(planted.cache / "dsh-home"))
    DenyAllApproval(Context()).approve_escalation(request)
    assert stat.S_IMODE(os.stat(planted.cache / "dsh-home" / "escalations.jsonl").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(planted.cache / "dsh-home").st_mode) == 0o700
