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
from dsh.cli.policy_text import describe_policy
from dsh.sandbox.context import Context
from dsh.sandbox.gate import SCAN_DEGRADATION, with_scan_gap
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.profiles import ProfileError, load_profile
from dsh.sandbox.protected_scan import TreeIndex
from dsh.sandbox.runner import Enforcement
from dsh.sandbox.tree_cache import RACY_NS
from dsh.sandbox.trusted_changes import Baseline, trusted_changes

from tests.support.wait import wait_until

pytestmark = pytest.mark.usefixtures("no_tmpdir")


def service(workspace: Path, **config: Any) -> PolicyService:
    """Every git dir read-only unless a test names its profile (the built-in one commits)."""
    if "profile" not in config:
        strict = workspace.parent / "git-read-only.toml"
        strict.write_text('extends = "workspace-write"\ngit = "read-only"\n')
        config["profile"] = str(strict)
    return PolicyService(Context(), PolicyConfig(workspace=str(workspace), **config))


def commit_profile(tmp_path: Path) -> str:
    path = tmp_path / "commit.toml"
    path.write_text('extends = "workspace-write"\ngit = "commit"\n')
    return str(path)


def baseline(index: TreeIndex, root: Path) -> Baseline:
    from dsh.sandbox.trusted_changes import run_started_ns

    since = run_started_ns()
    return Baseline(since, index.refresh([root]))


def settled(directory: Path) -> None:
    """Wait until the setup's own writes are in clock ticks before a run would start.

    The kernel stamps ctimes from its coarse clock: a probe written now carries
    a stamp no earlier than any setup write, and the run's start is taken once
    the clock has moved past it.
    """
    from dsh.sandbox.trusted_changes import run_started_ns

    probe = directory / ".settle-probe"
    probe.write_bytes(b"")
    probe.unlink()
    stamp = os.lstat(directory).st_ctime_ns
    wait_until(lambda: run_started_ns() > stamp, "the coarse clock to pass the setup's last write")


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
    settled(workspace)
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
    settled(tmp_path)
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
    svc._start_search = None  # searched again with the new bound, not the one made at the start
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
    # A directory changed in the racy window before its listing is listed
    # again by the next search: let the tree just built leave it first.
    time.sleep(max(0.0, (os.lstat(root / "pkg7" / "mod3").st_ctime_ns + RACY_NS - time.time_ns()) / 1e9))
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
    settled(tmp_path)
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
    settled(tmp_path)
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
    settled(workspace)
    before = svc.baseline(policy)
    assert before is not None
    (workspace / "b" / ".cargo").mkdir(parents=True)
    (workspace / "b" / ".cargo" / "config").write_text("[target.x]\nrunner = './evil'\n")
    assert svc.changed_files(policy, before).paths == (workspace / "b" / ".cargo" / "config",)


# -- git's whole execution surface ----------------------------------------------------------
@pytest.fixture
def host_git(monkeypatch: pytest.MonkeyPatch, trusted_dir: Path) -> Path:
    """An empty host-wide git configuration: HOME, XDG and both config variables
    point into a private directory (the tests write the files they need there)."""
    home = trusted_dir / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(trusted_dir / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(trusted_dir / "global.gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(trusted_dir / "system.gitconfig"))
    for name in ("GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS"):
        monkeypatch.delenv(name, raising=False)
    return trusted_dir


def write(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("config", "files"),
    [
        ("[core]\n\tfsmonitor = python3 fsm.py\n", ["fsm.py"]),
        ("[alias]\n\tt = !sh tools.sh\n", ["tools.sh"]),
        ('[filter "x"]\n\tclean = node x.js --stdin\n', ["x.js"]),
        ("[alias]\n\tb = \"!bash -c 'python3 inner.py && make -s'\"\n", ["inner.py", "Makefile"]),
        ("[core]\n\tpager = perl --script=pager.pl\n", ["pager.pl"]),
        ('[diff "pdf"]\n\ttextconv = conv\n', ["conv"]),
        ("[credential]\n\thelper = !$(cat helper.sh)\n", ["helper.sh"]),
        ("[alias]\n\tb = !ninja\n\tc = !cmake -S . -B out\n", ["build.ninja", "CMakeLists.txt"]),
    ],
)
def test_bare_file_names_in_config_values_are_protected(
    workspace: Path, host_git: Path, config: str, files: list[str]
) -> None:
    repo = workspace / "r"
    git = make_repo(repo)
    (git / "config").write_text(config)
    for rel in [*files, "src/other.py"]:
        write(repo / rel)
    protected = service(workspace).resolve().protected_paths
    for rel in files:
        assert repo / rel in protected, rel
    assert repo / "src" not in protected and repo / "src" / "other.py" not in protected


def test_a_directory_word_protects_nothing(workspace: Path, host_git: Path) -> None:
    repo = workspace / "r"
    git = make_repo(repo)
    (git / "config").write_text("[alias]\n\tup = !cd src && ls ..\n")
    write(repo / "src" / "a.py")
    protected = service(workspace).resolve().protected_paths
    assert not {repo, repo / "src", workspace} & set(protected)


@pytest.mark.parametrize("where", ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "HOME", "XDG_CONFIG_HOME"])
def test_host_wide_config_values_apply_in_every_repository(
    workspace: Path, host_git: Path, where: str
) -> None:
    """``core.hooksPath = .githooks`` in the user's global (or the system)
    config makes ``.githooks`` of every repository run on the next commit."""
    config = {
        "GIT_CONFIG_GLOBAL": host_git / "global.gitconfig",
        "GIT_CONFIG_SYSTEM": host_git / "system.gitconfig",
        "HOME": host_git / "home" / ".gitconfig",
        "XDG_CONFIG_HOME": host_git / "xdg" / "git" / "config",
    }[where]
    write(config, "[core]\n\thooksPath = .githooks\n[alias]\n\tt = !sh tools.sh\n")
    first, second = make_repo(workspace / "a").parent, make_repo(workspace / "deep" / "b").parent
    for repo in (first, second):
        write(repo / ".githooks" / "pre-commit")
        write(repo / "tools.sh")
    svc = service(workspace)
    protected = svc.resolve().protected_paths
    for repo in (first, second):
        assert repo / ".githooks" in protected and repo / "tools.sh" in protected


def test_host_hooks_path_created_in_a_run_is_reported(workspace: Path, host_git: Path) -> None:
    write(host_git / "global.gitconfig", "[core]\n\thooksPath = .githooks\n")
    repo = make_repo(workspace / "r").parent
    svc = service(workspace)
    policy = svc.resolve()
    time.sleep(0.05)  # the setup's own writes land in earlier clock ticks
    before = svc.baseline(policy)
    assert before is not None
    write(repo / ".githooks" / "pre-commit")
    assert repo / ".githooks" / "pre-commit" in svc.changed_files(policy, before).paths


def test_include_chains_are_followed(workspace: Path, host_git: Path) -> None:
    """Global config -> include (relative) -> includeIf gitdir (taken as
    active whatever the condition) -> a filter naming a bare script; and a
    repository's own config including a file of its working tree."""
    write(host_git / "global.gitconfig", "[include]\n\tpath = inc/a.inc\n")
    write(host_git / "inc" / "a.inc", '[includeIf "gitdir:/nowhere/"]\n\tpath = ../b.inc\n')
    write(host_git / "b.inc", '[filter "f"]\n\tclean = perl filt.pl\n')
    repo = workspace / "r"
    git = make_repo(repo)
    (git / "config").write_text('[includeIf "onbranch:zzz"]\n\tpath = ../shared.gitconfig\n')
    write(repo / "shared.gitconfig", "[core]\n\tfsmonitor = ruby mon.rb\n")
    write(repo / "filt.pl")
    write(repo / "mon.rb")
    protected = service(workspace).resolve().protected_paths
    for rel in ("filt.pl", "shared.gitconfig", "mon.rb"):
        assert repo / rel in protected, rel


def test_worktree_config_is_read(workspace: Path, host_git: Path) -> None:
    repo = workspace / "r"
    git = make_repo(repo)
    (git / "config.worktree").write_text("[core]\n\tsshCommand = sh ssh.sh\n")
    write(repo / "ssh.sh")
    assert repo / "ssh.sh" in service(workspace).resolve().protected_paths


def test_host_config_inside_a_writable_root_is_protected(workspace: Path, host_git: Path) -> None:
    """``GIT_CONFIG_GLOBAL`` (or an included file) inside the workspace, and an
    absolute program path there: the command must not rewrite them."""
    inside = write(workspace / "dot" / "gitconfig", "[include]\n\tpath = more.inc\n")
    write(workspace / "dot" / "more.inc", f"[core]\n\tfsmonitor = {workspace}/bin/mon\n")
    write(workspace / "bin" / "mon")
    os.environ["GIT_CONFIG_GLOBAL"] = str(inside)
    protected = service(workspace).resolve().protected_paths
    for path in (inside, workspace / "dot" / "more.inc", workspace / "bin" / "mon"):
        assert path in protected, path


def test_git_config_environment_values_count(
    workspace: Path, host_git: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "python3 envmon.py")
    repo = make_repo(workspace / "r").parent
    write(repo / "envmon.py")
    assert repo / "envmon.py" in service(workspace).resolve().protected_paths


def test_config_rewritten_with_same_size_and_mtime_is_read_again(workspace: Path, host_git: Path) -> None:
    """The parse cache must not hide a rewrite whose size and mtime were set back."""
    repo = workspace / "r"
    git = make_repo(repo)
    (git / "config").write_text("[core]\n\tfsmonitor = sh aaaa.sh\n")
    write(repo / "aaaa.sh")
    write(repo / "bbbb.sh")
    svc = service(workspace)
    assert repo / "aaaa.sh" in svc.resolve().protected_paths
    st = os.stat(git / "config")
    (git / "config").write_text("[core]\n\tfsmonitor = sh bbbb.sh\n")
    os.utime(git / "config", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert repo / "bbbb.sh" in svc.resolve().protected_paths


@pytest.mark.parametrize("name", [".gitmodules", ".gitattributes"])
def test_gitmodules_and_gitattributes_are_trusted_names(workspace: Path, host_git: Path, name: str) -> None:
    write(workspace / "a" / name, "x\n")
    svc = service(workspace)
    policy = svc.resolve()
    assert workspace / "a" / name in policy.protected_paths
    time.sleep(0.05)
    before = svc.baseline(policy)
    assert before is not None
    write(workspace / "b" / name, "x\n")
    assert workspace / "b" / name in svc.changed_files(policy, before).paths


NEW_TOOL_NAMES = [
    ".gemini/settings.json", ".zed/tasks.json", ".kiro/hooks/h.json", ".amazonq/mcp.json",
    ".continue/config.yaml", ".roo/mcp.json", ".windsurf/rules.md", "opencode.json", ".aider.conf.yml",
    ".vimrc", ".nvimrc", "lefthook.yml", ".lefthook.yml", ".bazelrc", ".lfsconfig", "mise.toml", ".mise.toml",
    "rust-toolchain.toml", "rust-toolchain", ".pdbrc", ".Rprofile", ".irbrc", ".pryrc", "bunfig.toml",
]  # fmt: skip


@pytest.mark.parametrize("rel", NEW_TOOL_NAMES)
def test_tool_configs_people_run_today_are_protected_and_reported(workspace: Path, rel: str) -> None:
    top = rel.split("/")[0]
    write(workspace / "old" / rel, "x\n")
    svc = service(workspace)
    policy = svc.resolve()
    assert workspace / "old" / top in policy.protected_paths
    time.sleep(0.05)
    before = svc.baseline(policy)
    assert before is not None
    write(workspace / "new" / "deep" / rel, "x\n")
    assert workspace / "new" / "deep" / rel in svc.changed_files(policy, before).paths


def test_every_protected_name_says_which_tool_reads_it_and_what_it_runs() -> None:
    from dsh.sandbox.protected_names import protected_name_entries
    from dsh.sandbox.protected_scan import DEFAULT_PROTECTED_NAMES

    entries = protected_name_entries()
    assert len(entries) >= 50 and DEFAULT_PROTECTED_NAMES == tuple(e.name for e in entries)
    for entry in entries:
        assert len(entry.source) > 3 and len(entry.runs) > 10, entry
    for rel in NEW_TOOL_NAMES:
        assert rel.split("/")[0] in DEFAULT_PROTECTED_NAMES, rel
    assert {".gitmodules", ".gitattributes"} <= set(DEFAULT_PROTECTED_NAMES)


def test_hard_link_to_a_protected_file_is_protected_too(workspace: Path, host_git: Path) -> None:
    """A run made ``cfg`` a second name of a new repository's ``.git/config``
    (and of a hook): the next run must not rewrite them through it."""
    git = make_repo(workspace / "r")
    write(git / "hooks" / "post-checkout")
    os.link(git / "config", workspace / "cfg")
    (workspace / "deep").mkdir()
    os.link(git / "hooks" / "post-checkout", workspace / "deep" / "h")
    (workspace / "plain").write_text("x\n")
    protected = service(workspace).resolve().protected_paths
    assert workspace / "cfg" in protected and workspace / "deep" / "h" in protected
    assert workspace / "plain" not in protected


def test_link_inside_a_protected_directory_protects_its_target(workspace: Path, host_git: Path) -> None:
    git = make_repo(workspace / "r")
    write(workspace / "r" / "tools" / "hook.sh")
    (git / "hooks" / "pre-commit").symlink_to("../../tools/hook.sh")
    (workspace / ".vscode").mkdir()
    write(workspace / "cfg" / "tasks.json", "{}")
    (workspace / ".vscode" / "tasks.json").symlink_to(workspace / "cfg" / "tasks.json")
    protected = service(workspace).resolve().protected_paths
    assert workspace / "r" / "tools" / "hook.sh" in protected
    assert workspace / "cfg" / "tasks.json" in protected


def test_writes_behind_an_existing_symlinked_protected_name_are_reported(workspace: Path, host_git: Path) -> None:
    """``.codex -> d`` existed before the run; the run writes ``d/config.toml``
    (what landlock cannot stop): reported under the name the tool reads."""
    (workspace / "d").mkdir()
    (workspace / ".codex").symlink_to("d")
    svc = service(workspace)
    policy = svc.resolve()
    time.sleep(0.05)
    before = svc.baseline(policy)
    assert before is not None
    write(workspace / "d" / "config.toml", "x\n")
    assert workspace / ".codex" / "config.toml" in svc.changed_files(policy, before).paths


def test_writes_through_a_hard_link_are_reported(workspace: Path, host_git: Path) -> None:
    git = make_repo(workspace / "r")
    os.link(git / "config", workspace / "cfg")
    svc = service(workspace)
    policy = svc.resolve()
    time.sleep(0.05)
    before = svc.baseline(policy)
    assert before is not None
    with open(workspace / "cfg", "a") as f:  # what landlock lets through
        f.write("[core]\n\tfsmonitor = evil\n")
    assert git / "config" in svc.changed_files(policy, before).paths


def test_hooks_path_naming_the_working_tree_protects_its_hooks_not_the_tree(workspace: Path, host_git: Path) -> None:
    write(host_git / "global.gitconfig", "[core]\n\thooksPath = .\n")
    repo = make_repo(workspace / "r").parent
    write(repo / "pre-commit")
    write(repo / "main.py")
    svc = service(workspace)
    policy = svc.resolve()
    assert repo / "pre-commit" in policy.protected_paths
    assert repo not in policy.protected_paths and repo / "main.py" not in policy.protected_paths
    time.sleep(0.05)
    before = svc.baseline(policy)
    assert before is not None
    write(repo / "main.py", "changed\n")
    write(repo / "post-checkout")
    assert svc.changed_files(policy, before).paths == (repo / "post-checkout",)


def test_ordinary_values_protect_nothing(workspace: Path, host_git: Path) -> None:
    """``init.defaultBranch = main`` is no program: a build's ``main`` binary stays writable."""
    write(host_git / "global.gitconfig", "[init]\n\tdefaultBranch = main\n[pull]\n\trebase = true\n"
                                         "[core]\n\texcludesFile = ignored.txt\n")
    repo = make_repo(workspace / "r").parent
    for rel in ("main", "true", "ignored.txt"):
        write(repo / rel)
    protected = service(workspace).resolve().protected_paths
    assert repo / "main" not in protected and repo / "true" not in protected
    assert repo / "ignored.txt" in protected  # a file git reads and trusts
