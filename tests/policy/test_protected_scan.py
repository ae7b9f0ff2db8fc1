"""Repositories and trusted names at any depth: what the policy keeps read-only,
what a run is reported to have created, and how fast the search stays."""

from __future__ import annotations

import os
import shutil
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
from dsh.sandbox.protected_scan import TreeIndex, changed_since, run_started_ns
from dsh.sandbox.runner import Enforcement


@pytest.fixture(autouse=True)
def _no_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TMPDIR", raising=False)
    yield


def service(workspace: Path, **config: Any) -> PolicyService:
    return PolicyService(Context(), PolicyConfig(workspace=str(workspace), **config))


def commit_profile(tmp_path: Path) -> str:
    path = tmp_path / "commit.toml"
    path.write_text('extends = "workspace-write"\ngit = "commit"\n')
    return str(path)


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
    since = run_started_ns()
    new = make_repo(workspace / "x" / "new")
    (new / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    (new / "hooks" / "pre-push.sample").write_text("")  # git never runs samples
    (old / "objects" / "ab").mkdir()  # not a control part
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "tasks.json").write_text("{}")
    changed = set(svc.changed_files(policy, since))
    assert changed == {new / "config", new / "hooks" / "post-checkout", workspace / ".vscode" / "tasks.json"}


def test_changed_since_sees_rewritten_file_in_existing_repo(tmp_path: Path) -> None:
    git = make_repo(tmp_path / "r")
    index = TreeIndex(())
    time.sleep(0.05)
    since = run_started_ns()
    (git / "config").write_text("[core]\n\tfsmonitor = evil\n")
    os.utime(git / "config", ns=(0, 0))  # mtime can be set back; ctime cannot
    assert changed_since(index.refresh([tmp_path]), since) == (git / "config",)


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
    since = run_started_ns()
    for part in ("objects", "refs"):
        (workspace / part).mkdir()
    (workspace / "HEAD").write_text("ref: refs/heads/main\n")
    (workspace / "config").write_text("[core]\n\tfsmonitor = evil\n")
    assert workspace / "config" in svc.changed_files(policy, since)  # planted: reported
    policy = svc.resolve()
    assert workspace / "config" in policy.protected_paths  # and read-only from the next run
    assert workspace not in policy.protected_paths
