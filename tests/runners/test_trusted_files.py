"""Repositories and configs a later host action trusts, through the real CLI and
real runners, judged from the host after the run (as root, and as nobody)."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.require import require_runner
from tests.support.runners import nobody_python

NOBODY = 65534
ORIGINAL = "[core]\n\trepositoryformatversion = 0\n"
USERS = ["caller", "nobody"]
# What landlock cannot hold (the protected paths among it), accepted where a
# test wants to see what happens when the profile accepts it.
LANDLOCK_ACCEPT = (
    'accept_degraded = ["landlock-protected-paths", "landlock-metadata", "landlock-process-escape",'
    ' "landlock-process-list"]\n'
)


@dataclass(frozen=True)
class Run:
    returncode: int
    out: str
    err: str


@dataclass(frozen=True)
class Box:
    ws: Path
    user: str

    def run(self, runner: str, script: str, *extra: str, cwd: Path | None = None) -> Run:
        argv = [*cli(self.user), "run", "--runner", runner, *extra, "-c", script]
        # A docker container that is this run's own: the host is judged right after the run, where a kept
        # container's placeholders would still stand (test_kept_containers covers those).
        env = {"PATH": os.environ["PATH"], "HOME": str(self.ws.parent), "LANG": "C.UTF-8",
               "DSH_SANDBOX_KEEP_WARM": "0"}
        kwargs: dict[str, object] = {}
        if self.user == "nobody":
            # The docker group (as CI's unprivileged conformance run has it) and nothing else.
            kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
        proc = subprocess.run(argv, cwd=cwd or self.ws, env=env, capture_output=True, text=True,
                              timeout=240, check=False, **kwargs)  # type: ignore[call-overload]
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def own(self) -> None:
        """Everything under the box belongs to the user the command runs as."""
        if self.user == "nobody":
            for dirpath, dirnames, filenames in os.walk(self.ws.parent):
                for name in (dirpath, *[os.path.join(dirpath, n) for n in dirnames + filenames]):
                    os.lchown(name, NOBODY, NOBODY)


def cli(user: str) -> list[str]:
    """The CLI under this interpreter; for nobody, through an interpreter it can
    reach (a pyenv build under /root is not), with this environment's packages."""
    # Both the path as given (a venv's bin under /root is not reachable though
    # the interpreter it links to is) and the file it resolves to.
    if user != "nobody" or (_reachable_by_nobody(sys.executable)
                            and _reachable_by_nobody(os.path.realpath(sys.executable))):
        return [sys.executable, "-P", "-m", "dsh.cli"]
    made = nobody_python()
    if made is not None:
        return [made, "-P", "-m", "dsh.cli"]
    base = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(base):
        pytest.skip(f"SANDBOX_UNAVAILABLE: no interpreter nobody can run ({base})")
    sites = [p for p in sys.path if p.endswith("site-packages")]
    boot = (f"import runpy, site, sys; [site.addsitedir(p) for p in {sites!r}]; "
            "sys.argv[0] = 'dsh-sandbox'; runpy.run_module('dsh.cli', run_name='__main__')")
    return [base, "-P", "-c", boot]


def _reachable_by_nobody(path: str) -> bool:
    parts = Path(path).parents
    return all(os.stat(p).st_mode & 0o001 for p in parts) and bool(os.stat(path).st_mode & 0o005)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                   capture_output=True)


def repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", ".")
    (path / ".git" / "config").write_text(ORIGINAL)
    return path / ".git"


def profile(box: Box, text: str) -> str:
    path = box.ws.parent / "profile.toml"
    path.write_text('extends = "workspace-write"\n' + text)
    os.chmod(path, 0o644)
    return str(path)


@pytest.fixture(params=USERS)
def box(request: pytest.FixtureRequest) -> Iterator[Box]:
    user: str = request.param
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    if shutil.which("git") is None:
        pytest.skip("SANDBOX_UNAVAILABLE: git is not installed")
    # Outside /tmp: the box is the command's $HOME, and a writable /tmp holding a
    # home (its .ssh, shell rc files) is refused as a dangerous root.
    base = Path(tempfile.mkdtemp(prefix="dsh-trusted-", dir="/var/tmp")).resolve()
    os.chmod(base, 0o755)  # nobody must reach it
    ws = base / "ws"
    ws.mkdir()
    try:
        yield Box(ws, user)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def docker_group() -> list[int]:
    try:
        return [grp.getgrnam("docker").gr_gid]
    except KeyError:
        return []


def runner_for(name: str, box: Box) -> str:
    if name == "docker" and box.user == "nobody" and not docker_group():
        pytest.skip("SANDBOX_UNAVAILABLE: docker: no docker group lets nobody reach the daemon")
    require_runner(name)
    return name


PLANT_NESTED = (
    "echo pwn >> a/b/.git/config; printf '#!/bin/sh\\necho pwn\\n' > a/b/.git/hooks/post-checkout; "
    "mv a/b a/b2 && mkdir -p a/b/.git/hooks && echo pwn > a/b/.git/hooks/post-checkout; exit 0"
)


def assert_nested_intact(box: Box) -> None:
    git_dir = box.ws / "a" / "b" / ".git"
    assert (git_dir / "config").read_text() == ORIGINAL
    assert not (git_dir / "hooks" / "post-checkout").exists()
    assert not (box.ws / "a" / "b2").exists()


@pytest.mark.parametrize("name", ["bwrap", "docker"])
def test_nested_repository_hooks_and_config_stay_read_only(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    repo(box.ws / "a" / "b")
    box.own()
    ran = box.run(runner, PLANT_NESTED)
    assert ran.returncode == 0, ran.err
    assert_nested_intact(box)


def test_landlock_refuses_nested_repository_by_default_and_reports_when_accepted(box: Box) -> None:
    runner = runner_for("landlock", box)
    repo(box.ws / "a" / "b")
    box.own()
    refused = box.run(runner, PLANT_NESTED)
    assert refused.returncode == 125 and "landlock-protected-paths" in refused.err
    assert_nested_intact(box)
    prof = profile(box, LANDLOCK_ACCEPT)
    ran = box.run(runner, "echo pwn >> a/b/.git/config", "--profile", prof)
    assert ran.returncode == 0, ran.err
    # Landlock cannot hold it: the write happened, and it does not go unnoticed.
    assert "pwn" in (box.ws / "a" / "b" / ".git" / "config").read_text()
    assert f"{box.ws}/a/b/.git/config" in ran.err and "created or changed" in ran.err


@pytest.mark.parametrize("name", ["bwrap", "docker"])
def test_commit_option_commits_and_keeps_hooks_read_only(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    git_dir = repo(box.ws / "sub")
    git(box.ws / "sub", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "one")
    before = (git_dir / "refs" / "heads" / "main").read_text()
    box.own()
    prof = profile(box, 'git = "commit"\n')
    script = (
        "cd sub && echo hi > f && git add f && git -c user.email=a@b -c user.name=a commit -qm two || exit 9; "
        "echo x >> .git/hooks/pre-commit; echo x >> .git/config; git config core.fsmonitor evil; exit 0"
    )
    ran = box.run(runner, script, "--profile", prof)
    assert ran.returncode == 0, ran.err
    assert (git_dir / "refs" / "heads" / "main").read_text() != before  # committed
    assert (git_dir / "config").read_text() == ORIGINAL
    assert not (git_dir / "hooks" / "pre-commit").exists()
    # With git = "read-only" the git dir is read-only as a whole: no commit.
    strict = profile(box, 'git = "read-only"\n')
    ran = box.run(runner, "cd sub && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m three",
                  "--profile", strict)
    assert ran.returncode != 0


@pytest.mark.parametrize("name", ["bwrap", "docker", "landlock"])
def test_git_init_works_and_a_planted_hook_is_reported(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    box.own()
    extra = ()
    if name == "landlock":  # .dsh stays protected, which landlock cannot do
        extra = ("--profile", profile(box, LANDLOCK_ACCEPT))
    script = (
        "git init -q . && git init -q deep/er && mkdir -p deep/er/.git/hooks && "
        "printf '#!/bin/sh\\n' > deep/er/.git/hooks/post-checkout && mkdir -p .vscode && "
        "echo {} > .vscode/tasks.json"
    )
    ran = box.run(runner, script, *extra)
    assert ran.returncode == 0, ran.err
    assert (box.ws / ".git" / "HEAD").is_file()
    for rel in (".git/config", "deep/er/.git/hooks/post-checkout", ".vscode/tasks.json"):
        assert f"{box.ws}/{rel}" in ran.err, rel
    # The next run finds the new repositories and keeps them read-only.
    if name != "landlock":
        ran = box.run(runner, "echo x >> deep/er/.git/config; echo x >> .git/config; exit 0")
        assert "x" not in (box.ws / "deep" / "er" / ".git" / "config").read_text().splitlines()
        assert "created or changed" not in ran.err


def test_docker_symlinked_git_is_refused(box: Box) -> None:
    runner = runner_for("docker", box)
    real = repo(box.ws / "realgit-holder")
    (box.ws / "realgit").symlink_to(real)
    (box.ws / ".git").symlink_to("realgit")
    box.own()
    ran = box.run(runner, "rm .git && mkdir -p .git/hooks && echo pwn > .git/hooks/pre-commit")
    assert ran.returncode == 125 and "docker-protected-symlink" in ran.err
    assert (box.ws / ".git").is_symlink() and not (real / "hooks" / "pre-commit").exists()


@pytest.mark.parametrize("name", ["bwrap", "docker"])
def test_workspace_ancestors_under_a_writable_root_are_pinned(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    outer = box.ws / "outer"
    ws = outer / "mid" / "proj"
    repo(ws)
    box.own()
    script = (
        f"cd / && mv {outer}/mid {outer}/mid2 && mkdir -p {ws}/.git/hooks && "
        f"echo pwn > {ws}/.git/hooks/pre-commit; exit 0"
    )
    ran = box.run(runner, script, "--workspace", str(ws), "--writable", str(outer), cwd=ws)
    assert ran.returncode == 0, ran.err
    assert not (outer / "mid2").exists()
    assert (ws / ".git" / "config").read_text() == ORIGINAL
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
