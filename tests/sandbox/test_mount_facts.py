"""The snapshot a mount plan is made from, on the live filesystem: each
path's canonical form (built on its parent's) is what ``realpath`` says, and
a directory is listed only where one mask over it can pay."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_facts import gather_facts
from dsh.sandbox.policy import SandboxPolicy


def test_canonical_forms_agree_with_realpath_through_links_and_missing_tails(tmp_path: Path) -> None:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    (ws / "real" / "deep").mkdir(parents=True)
    (base / "elsewhere" / "x").mkdir(parents=True)
    os.symlink("real", ws / "rel")  # relative
    os.symlink(base / "elsewhere", ws / "abs")
    os.symlink(ws / "rel", ws / "chain")  # a link to a link
    os.symlink(ws / "nowhere", ws / "dangling")
    named = [ws / "rel" / "deep" / ".git", ws / "abs" / "x" / ".dsh", ws / "chain" / "deep", ws / "dangling" / "y",
             ws / "missing" / "a" / "b", ws / "real" / "deep"]
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                           protected_paths=tuple(named))
    facts = gather_facts(policy, os.geteuid())
    for path in named:
        assert facts.of(str(path)).real == os.path.realpath(path), path
    assert facts.of(str(ws / "rel")).kind == "symlink" and facts.of(str(ws / "missing" / "a")).kind == "missing"


def test_only_a_directory_one_mask_can_serve_is_listed(trusted_dir: Path, tmp_path: Path) -> None:
    base = trusted_dir  # not under /tmp, which a private /tmp replaces
    ws, many, few = base / "ws", base / "many", base / "few"
    for d in (ws, *(many / f"h{i}" for i in range(3)), many / "other", *(few / f"o{i}" for i in range(4)),
              few / "h0"):
        d.mkdir(parents=True)
    hidden = (*(many / f"h{i}" for i in range(3)), few / "h0", ws / "inside")
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                           hidden_paths=hidden)
    facts = gather_facts(policy, os.geteuid())
    assert str(many) in facts.listings and sorted(facts.listings[str(many)]) == ["h0", "h1", "h2", "other"]
    assert facts.of(str(many / "other")).kind == "dir"
    assert str(few) not in facts.listings  # four entries to show again for one hidden
    assert str(ws) not in facts.listings  # inside a root: new entries there are the command's
    in_tmp = Path(os.path.realpath(tmp_path))  # under /tmp, which a private /tmp replaces: never
    for i in range(3):
        (in_tmp / f"h{i}").mkdir()
    under_tmp = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=ws,
                              hidden_paths=tuple(in_tmp / f"h{i}" for i in range(3)))
    assert str(in_tmp) not in gather_facts(under_tmp, os.geteuid()).listings


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
                    "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True, capture_output=True)


def test_the_git_dirs_that_point_back_are_vouched_for(tmp_path: Path) -> None:
    """A real worktree and a real submodule: their git dirs name the ``.git``
    file in return (``gitdir``, ``core.worktree``), the worktree's common dir
    is two levels above its git dir; a ``.git`` file naming any other
    directory vouches for nothing."""
    from dsh.sandbox.enclosing_repo import vouched_git_dirs

    base = Path(os.path.realpath(tmp_path))
    lib, main = base / "lib", base / "main"
    for repo in (lib, main):
        repo.mkdir()
        _git("init", "-q", cwd=repo)
        (repo / "f").write_text("x\n")
        _git("add", "f", cwd=repo)
        _git("commit", "-qm", "one", cwd=repo)
    _git("worktree", "add", "-q", str(base / "wt"), cwd=main)
    _git("submodule", "add", "-q", str(lib), "sub", cwd=main)
    assert vouched_git_dirs(base / "wt" / ".git", base / "wt") == [main / ".git" / "worktrees" / "wt", main / ".git"]
    assert vouched_git_dirs(main / "sub" / ".git", main / "sub") == [main / ".git" / "modules" / "sub"]
    planted = base / "planted"
    planted.mkdir()
    (planted / ".git").write_text(f"gitdir: {main / '.git'}\n")
    assert vouched_git_dirs(planted / ".git", planted) == []
    (planted / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    assert vouched_git_dirs(planted / ".git", planted) == []
    (planted / ".git").unlink()
    (planted / ".git").symlink_to(main / ".git")
    assert vouched_git_dirs(planted / ".git", planted) == []


def test_hidden_entries_of_a_state_directory_masked_whole_are_not_looked_at(trusted_dir: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other workspace's sandbox HOME is a hidden path: one per workspace
    this user ever ran in.  Their directory is masked whole, so the snapshot
    takes no fact of them and the plan no mask of its own for them; a hidden
    path inside what the run keeps (its own HOME) still gets both."""
    from dsh.sandbox.mount_plan import plan_mounts
    from dsh.sandbox.sandbox_home import homes_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(trusted_dir / "cache"))
    homes = homes_dir()
    own, others = homes / "ws-own", [homes / f"ws-{i}" for i in range(40)]
    inside_own = own / "kept-secret"
    ws = trusted_dir / "ws"
    for d in (ws, own, inside_own, *others):
        d.mkdir(parents=True)
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws, own), home=own,
                           hidden_paths=(*others, inside_own))
    facts = gather_facts(policy, os.geteuid())
    assert str(homes) in facts.state_parents
    assert [o for o in others if str(o) in facts.paths] == []
    assert facts.of(str(inside_own)).kind == "dir"
    entries = [(e.kind, e.path) for e in plan_mounts(policy, facts).entries]
    assert ("mask-dir", str(homes)) in entries
    assert ("mask-dir", str(inside_own)) in entries
    assert not [e for e in entries if e[1] in set(map(str, others))]

    # An entry swapped for a link (its HOME moved away): looked at as any
    # hidden path, and the plan refuses rather than leave the target shown.
    away = trusted_dir / "away"
    os.rename(others[1], away)
    os.symlink(away, others[1])
    linked = gather_facts(policy, os.geteuid())
    assert str(others[1]) in linked.paths and str(others[2]) not in linked.paths
    with pytest.raises(SandboxUnavailable, match=r"is a symbolic link to .*rm "):
        plan_mounts(policy, linked)
    os.unlink(others[1])
    os.rename(away, others[1])

    # The state directory swapped for a link to a copy: its entries are looked
    # at again, and one that resolves elsewhere now refuses the plan.
    copy = trusted_dir / "copy"
    os.rename(homes, copy)
    os.symlink(copy, homes)
    moved = gather_facts(policy, os.geteuid())
    assert str(others[0]) in moved.paths
    with pytest.raises(SandboxUnavailable, match="now resolves"):
        plan_mounts(policy, moved)


def test_a_state_directory_without_links_is_listed_once_not_looked_at_entry_by_entry(
        trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a HOME was swapped for a link is answered by one listing of
    their directory, reused while its ctime holds; a link made since, or a
    directory changed too lately to trust its ctime, is looked at again."""
    from dsh.sandbox import mount_facts
    from dsh.sandbox.mount_plan import plan_mounts
    from dsh.sandbox.sandbox_home import homes_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(trusted_dir / "cache"))
    monkeypatch.setattr(mount_facts, "_LINK_FREE", {})
    homes = homes_dir()
    own, others = homes / "ws-own", [homes / f"ws-{i}" for i in range(200)]
    ws = trusted_dir / "ws"
    for d in (ws, own, *others):
        d.mkdir(parents=True)
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws, own), home=own,
                           hidden_paths=tuple(others))
    # Made a moment ago: its ctime could still share a clock tick with a change.
    gather_facts(policy, os.geteuid())
    assert str(homes) not in mount_facts._LINK_FREE
    monkeypatch.setattr(mount_facts, "RACY_NS", 50_000_000)
    time.sleep(0.1)
    looked: list[str] = []
    lstat = os.lstat

    def counted(path: object, *args: object, **kwargs: object) -> os.stat_result:
        looked.append(os.fspath(path))  # type: ignore[arg-type]
        return lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", counted)
    gather_facts(policy, os.geteuid())
    gather_facts(policy, os.geteuid())
    assert mount_facts._LINK_FREE[str(homes)][1] is True
    assert set(looked) & set(map(str, others)) == set()
    assert str(own) in looked  # the run's own HOME is kept: looked at
    monkeypatch.setattr(os, "lstat", lstat)

    away = trusted_dir / "away"
    os.rename(others[7], away)
    os.symlink(away, others[7])
    linked = gather_facts(policy, os.geteuid())
    assert str(others[7]) in linked.paths
    with pytest.raises(SandboxUnavailable, match=r"is a symbolic link to .*rm "):
        plan_mounts(policy, linked)


def test_a_placeholder_under_an_exchanged_directory_is_never_taken_for_the_users_own(tmp_path: Path) -> None:
    """Its mode and its emptiness were read by two lookups of its name: a
    directory on the way exchanged with a link in between (to a directory
    without it) made a placeholder a protected directory of the user's, which
    the docker runner then bound by that name."""
    import ctypes
    import threading

    from dsh.sandbox.mount_facts import PLACEHOLDER_MODE, path_fact

    ws = tmp_path / "ws"
    (ws / "victim").mkdir(parents=True)
    (ws / "victim" / ".dsh").mkdir(mode=PLACEHOLDER_MODE)
    (ws / "victim" / ".dsh").chmod(PLACEHOLDER_MODE)
    (tmp_path / "outside").mkdir()
    (ws / "vlink").symlink_to(tmp_path / "outside")
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = str(ws / "victim").encode(), str(ws / "vlink").encode()
    stop = threading.Event()

    def exchange() -> None:
        while not stop.is_set():
            libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE

    swapper = threading.Thread(target=exchange)
    swapper.start()
    kinds: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                kind = path_fact(str(ws / "victim" / ".dsh"), None).kind
            except SandboxUnavailable:
                kind = "refused"  # a path that keeps changing: a clean refusal, also right
            kinds[kind] = kinds.get(kind, 0) + 1
    finally:
        stop.set()
        swapper.join()
    assert "dir" not in kinds, kinds
    assert kinds.get("placeholder"), kinds
