"""Repositories and trusted names at any depth: what the policy keeps read-only,
what a run is reported to have created, and how fast the search stays."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.sandbox.context import Context
from dsh.sandbox.host import SCAN_DEGRADATION, with_scan_gap
from dsh.sandbox.policy_service import PolicyConfig, PolicyService, describe_policy
from dsh.sandbox.profiles import ProfileError, load_profile
from dsh.sandbox.protected_scan import TreeIndex
from dsh.sandbox.runner import Enforcement
from dsh.sandbox.trusted_changes import Baseline, trusted_changes

pytestmark = pytest.mark.usefixtures("no_tmpdir")


def service(workspace: Path, **config: Any) -> PolicyService:
    return PolicyService(Context(), PolicyConfig(workspace=str(workspace), **config))


def commit_profile(tmp_path: Path) -> str:
    path = tmp_path / "commit.toml"
    path.write_text('extends = "workspace-write"\ngit = "commit"\n')
    return str(path)


def baseline(index: TreeIndex, root: Path) -> Baseline:
    from dsh.sandbox.trusted_changes import run_started_ns

    since = run_started_ns()
    return Baseline(since, index.refresh([root]))


def make_repo(path: Path) -> Path:
    git = path / ".git"
    for part in ("hooks", "info", "objects", "refs/heads", "logs"):
        (git / part).mkdir(parents=True)
    (git / "config").write_text("[core]\n")
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    return git


def test_nested_repository_is_read_only_at_any_depth(workspace: Path) -> None:
    deep = make_repo(workspace / "a" / "b" / "c" / "vendor")
    protected = service(workspace).resolve().protected_paths
    assert deep in protected
    assert workspace / ".git" not in protected  # missing: git init stays possible


def test_commit_keeps_only_control_parts(workspace: Path, tmp_path: Path) -> None:
    git = make_repo(workspace / "sub")
    (git / "commondir").write_text("../elsewhere\n")
    policy = service(workspace, profile=commit_profile(tmp_path)).resolve()
    assert policy.git == "commit"
    for part in ("hooks", "config", "info", "commondir"):
        assert git / part in policy.protected_paths, part
    for part in ("objects", "refs", "logs", "HEAD", ""):
        assert (git / part if part else git) not in policy.protected_paths, part
    assert any(line.startswith("git: commit") for line in describe_policy(policy))


def test_git_option_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('git = "write"\n')
    with pytest.raises(ProfileError, match=r"key 'git' at line 1: must be \"read-only\" or \"commit\""):
        load_profile(str(path))


def test_default_trusted_names_at_any_depth(workspace: Path) -> None:
    (workspace / "pkg" / ".vscode").mkdir(parents=True)
    (workspace / "pkg" / "deep" / ".envrc").parent.mkdir()
    (workspace / "pkg" / "deep" / ".envrc").write_text("")
    (workspace / "pkg" / "deep" / ".mcp.json").write_text("{}")
    protected = service(workspace).resolve().protected_paths
    for rel in ("pkg/.vscode", "pkg/deep/.envrc", "pkg/deep/.mcp.json"):
        assert workspace / rel in protected, rel


def test_git_file_at_depth_protects_its_git_dir(workspace: Path, tmp_path: Path) -> None:
    real = make_repo(tmp_path / "outside")
    (workspace / "wt").mkdir()
    (workspace / "wt" / ".git").write_text(f"gitdir: {real}\n")
    protected = service(workspace).resolve().protected_paths
    assert workspace / "wt" / ".git" in protected and real in protected


def test_repository_made_between_runs_is_protected_next_time(workspace: Path) -> None:
    svc = service(workspace)
    assert not any(p.name == ".git" for p in svc.resolve().protected_paths if workspace in p.parents)
    git = make_repo(workspace / "later" / "deeper")
    assert git in svc.resolve().protected_paths


def test_changed_since_reports_created_control_files(workspace: Path) -> None:
    old = make_repo(workspace / "old")
    (old / "hooks" / "pre-commit.sample").write_text("")
    svc = service(workspace)
    policy = svc.resolve()
    time.sleep(0.05)  # the setup's own writes land in earlier clock ticks
    before = svc.baseline(policy)
    assert before is not None
    new = make_repo(workspace / "x" / "new")
    (new / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    (new / "hooks" / "pre-push.sample").write_text("")  # git never runs samples
    (old / "objects" / "ab").mkdir()  # not a control part
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "tasks.json").write_text("{}")
    changed = set(svc.changed_files(policy, before).paths)
    assert changed == {new / "config", new / "hooks" / "post-checkout", workspace / ".vscode" / "tasks.json"}


def test_changed_since_sees_rewritten_file_in_existing_repo(tmp_path: Path) -> None:
    git = make_repo(tmp_path / "r")
    index = TreeIndex(())
    time.sleep(0.05)
    before = baseline(index, tmp_path)
    (git / "config").write_text("[core]\n\tfsmonitor = evil\n")
    os.utime(git / "config", ns=(0, 0))  # mtime can be set back; ctime cannot
    assert trusted_changes(before, index.refresh([tmp_path])).paths == (git / "config",)


def test_scan_bound_declares_a_degradation(workspace: Path) -> None:
    for i in range(30):
        (workspace / f"d{i}").mkdir()
    index = TreeIndex((), max_entries=10)
    found = index.refresh([workspace])
    assert found.incomplete == (workspace,)
    svc = service(workspace)
    svc._index.max_entries = 10  # a tree too big for the bound
    policy = svc.resolve()
    assert policy.unscanned_roots == (workspace,)
    enforcement = with_scan_gap(Enforcement.full(), policy)
    assert enforcement.level == "partial" and enforcement.degradations == (SCAN_DEGRADATION,)
    assert not enforcement.accepted_by(policy)
    assert any("protected-scan-incomplete" in line for line in describe_policy(policy))


@pytest.fixture
def big_tree(tmp_path: Path) -> Iterator[Path]:
    """50,000 empty files in 2,500 directories.  Built in /dev/shm when there is
    one: creating 50k files on a busy shared disk takes minutes, and the search
    reads cached directory entries either way."""
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    root = base / "big"
    try:
        for d in range(2500):
            sub = root / f"pkg{d // 100}" / f"mod{d % 100}"
            sub.mkdir(parents=True)
            for f in range(20):
                os.close(os.open(sub / f"f{f}.py", os.O_CREAT | os.O_WRONLY, 0o644))
        yield root
    finally:
        if base != tmp_path:
            shutil.rmtree(base)


def test_scan_of_50k_files_stays_fast(big_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = big_tree
    make_repo(root / "pkg7" / "mod3")
    index = TreeIndex((".vscode",))
    started = time.perf_counter()
    cold = index.refresh([root])
    cold_s = time.perf_counter() - started
    started = time.perf_counter()
    warm = index.refresh([root])
    warm_s = time.perf_counter() - started
    assert cold.repos == warm.repos == (root / "pkg7" / "mod3" / ".git",)
    with capsys.disabled():
        print(f"\n50k files: first search {cold_s * 1000:.0f} ms, unchanged tree {warm_s * 1000:.0f} ms")
    # Generous bounds (a shared 2-core machine): the point is one lstat per
    # directory once the tree is known, not a new listing of 50k entries.
    assert warm_s < cold_s and warm_s < 1.0 and cold_s < 10.0


@pytest.mark.parametrize("access", ["read-only", "commit"])
def test_hooks_path_in_the_working_tree_is_protected(workspace: Path, tmp_path: Path, access: str) -> None:
    git = make_repo(workspace / "app")
    (git / "config").write_text('[core]\n\thooksPath = .husky\n\tfsmonitor = "tools/monitor.sh"\n')
    (workspace / "app" / ".husky").mkdir()
    (workspace / "app" / "tools").mkdir()
    (workspace / "app" / "tools" / "monitor.sh").write_text("")
    os.mkfifo(workspace / "app" / "tools" / "fifo")
    (workspace / "fifo-repo" / ".git").mkdir(parents=True)
    os.mkfifo(workspace / "fifo-repo" / ".git" / "config")  # must not hang the host
    extra = {"profile": commit_profile(tmp_path)} if access == "commit" else {}
    protected = service(workspace, **extra).resolve().protected_paths
    assert workspace / "app" / ".husky" in protected
    assert workspace / "app" / "tools" / "monitor.sh" in protected
    assert workspace / "app" / "tools" not in protected


def test_bare_repository_layout_is_a_repository(workspace: Path) -> None:
    """git runs a directory holding HEAD, objects and refs as a repository (no
    .git needed): at any depth it is protected; a workspace made to look like
    one keeps its hooks and config read-only and stays writable itself."""
    bare = workspace / "vendor" / "lib.git"
    for part in ("objects", "refs", "hooks"):
        (bare / part).mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "config").write_text("[core]\n\tbare = true\n")
    svc = service(workspace)
    policy = svc.resolve()
    assert bare in policy.protected_paths
    before = svc.baseline(policy)
    assert before is not None
    for part in ("objects", "refs"):
        (workspace / part).mkdir()
    (workspace / "HEAD").write_text("ref: refs/heads/main\n")
    (workspace / "config").write_text("[core]\n\tfsmonitor = evil\n")
    assert workspace / "config" in svc.changed_files(policy, before).paths  # planted: reported
    policy = svc.resolve()
    assert workspace / "config" in policy.protected_paths  # and read-only from the next run
    assert workspace not in policy.protected_paths


def test_repository_renamed_into_place_over_two_runs_is_reported(tmp_path: Path) -> None:
    """Run 1 leaves a not-yet-repository; run 2 completes it and renames it to
    ``sub/.git``: no file under it has a new ctime, yet it is new where git looks."""
    index = TreeIndex((".vscode",))
    stage = tmp_path / "st"
    for part in ("objects", "refs", "hooks"):
        (stage / part).mkdir(parents=True)
    (stage / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    (stage / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    (tmp_path / "vs").mkdir()
    (tmp_path / "vs" / "tasks.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    first = index.refresh([tmp_path])
    assert first.repos == ()  # no HEAD: git would not take it for a git dir
    time.sleep(0.05)
    before = baseline(index, tmp_path)
    (stage / "HEAD").write_text("ref: refs/heads/main\n")
    os.utime(stage / "HEAD", ns=(0, 0))
    stage.rename(tmp_path / "sub" / ".git")
    (tmp_path / "vs").rename(tmp_path / ".vscode")
    changed = trusted_changes(before, index.refresh([tmp_path])).paths
    git = tmp_path / "sub" / ".git"
    assert {git / "config", git / "hooks" / "post-checkout", tmp_path / ".vscode" / "tasks.json"} <= set(changed)


def test_hooks_directory_renamed_into_an_existing_repository_is_reported(tmp_path: Path) -> None:
    git = make_repo(tmp_path / "r")
    shutil.rmtree(git / "hooks")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "pre-commit").write_text("#!/bin/sh\n")
    index = TreeIndex(())
    time.sleep(0.05)
    before = baseline(index, tmp_path)
    (tmp_path / "mine").rename(git / "hooks")
    assert trusted_changes(before, index.refresh([tmp_path])).paths == (git / "hooks" / "pre-commit",)


def test_git_dir_through_commondir_is_a_repository(tmp_path: Path) -> None:
    """HEAD and a ``commondir`` naming objects and refs elsewhere is a git dir to git."""
    main = make_repo(tmp_path / "main")
    wt = tmp_path / "w" / "linked"
    wt.mkdir(parents=True)
    (wt / "HEAD").write_text("ref: refs/heads/main\n")
    (wt / "commondir").write_text(f"{main}\n")
    subprocess.run(["git", "rev-parse", "--git-dir"], cwd=wt, check=True, capture_output=True)
    assert wt in TreeIndex(()).refresh([tmp_path]).repos


def test_path_too_long_makes_the_search_incomplete(tmp_path: Path) -> None:
    """A directory whose path is longer than PATH_MAX cannot be searched: a gap, not empty."""
    fd = os.open(tmp_path, os.O_RDONLY)
    here = tmp_path
    try:
        for _ in range(25):
            os.mkdir("d" * 200, dir_fd=fd)
            nxt = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
            here = here / ("d" * 200)
        os.mkdir(".git", dir_fd=fd)
    finally:
        os.close(fd)
    found = TreeIndex(()).refresh([tmp_path])
    assert found.repos == ()
    assert found.incomplete and all(len(str(p)) > 4000 or p == tmp_path for p in found.incomplete)
    before = Baseline(0, found)
    assert trusted_changes(before, found).unsearched == found.incomplete
    subprocess.run(["rm", "-rf", str(tmp_path / ("d" * 200))], check=True)


def test_config_values_that_run_working_tree_files_protect_them(workspace: Path) -> None:
    repo = workspace / "r"
    git = make_repo(repo)
    for rel in ("scripts/clean.sh", ".x/y.sh", "tools/pager", "project.gitconfig", "bin/helper", "al.sh"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("#!/bin/sh\n")
    (repo / "project.gitconfig").write_text('[filter "lfs"]\n\tsmudge = ./bin/helper %f\n')
    (git / "config").write_text(
        "[core]\n\tfsmonitor = sh .x/y.sh\n\tpager = tools/pager -R\n"
        '[include]\n\tpath = ../project.gitconfig\n[filter "x"]\n\tclean = "./scripts/clean.sh" %f\n'
        "[alias]\n\tst = !sh ./al.sh --flag\n\tup = !cd .. && make .\n"
    )
    protected = service(workspace).resolve().protected_paths
    for rel in ("scripts/clean.sh", ".x/y.sh", "tools/pager", "project.gitconfig", "bin/helper", "al.sh"):
        assert repo / rel in protected, rel
    assert repo not in protected and workspace not in protected  # "." and ".." name no program


def test_nested_names_protect_one_file_of_a_directory(workspace: Path) -> None:
    """``.cargo/config.toml`` (and ``.hg/hgrc``) are trusted at any depth; the
    rest of ``.cargo`` (a build cache) and of ``.hg`` stays writable."""
    crate = workspace / "a" / "crate"
    (crate / ".cargo" / "registry").mkdir(parents=True)
    (crate / ".cargo" / "config.toml").write_text("[build]\n")
    (workspace / ".hg").mkdir()
    (workspace / ".hg" / "hgrc").write_text("[hooks]\n")
    (workspace / ".pre-commit-config.yaml").write_text("repos: []\n")
    svc = service(workspace)
    policy = svc.resolve()
    protected = policy.protected_paths
    assert crate / ".cargo" / "config.toml" in protected
    assert workspace / ".hg" / "hgrc" in protected
    assert workspace / ".pre-commit-config.yaml" in protected
    assert crate / ".cargo" not in protected and crate / ".cargo" / "registry" not in protected
    time.sleep(0.05)  # the setup's own writes land in earlier clock ticks
    before = svc.baseline(policy)
    assert before is not None
    (workspace / "b" / ".cargo").mkdir(parents=True)
    (workspace / "b" / ".cargo" / "config").write_text("[target.x]\nrunner = './evil'\n")
    assert svc.changed_files(policy, before).paths == (workspace / "b" / ".cargo" / "config",)
