"""Repositories and trusted files outside the workspace, and git for real work,
through the real CLI and real runners, judged from the host after the run (as
root and as nobody): a repository deep in the shared /tmp, the repository the
workspace lies in, the workspace's parent directories, ``git commit`` in the
default profile, the session's private /tmp."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import (  # noqa: F401  (box is a fixture)
    LANDLOCK_ACCEPT,
    NOBODY,
    ORIGINAL,
    Box,
    box,
    cli,
    git,
    profile,
    repo,
    runner_for,
)

RUNNERS = ["bwrap", "docker", "landlock"]
IDENTITY = ("-c", "user.email=a@b", "-c", "user.name=a")


@pytest.fixture
def shared_tmp(box: Box) -> Iterator[Path]:  # noqa: F811
    """A directory in the host's real /tmp, as CI checkouts and clones are."""
    base = Path(tempfile.mkdtemp(prefix="dsh-tmprepo-", dir="/tmp")).resolve()
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def own(box: Box, top: Path) -> None:  # noqa: F811
    """The command's uid owns ``top``: only the sandbox stands between it and a write."""
    if box.user == "nobody":
        for dirpath, dirnames, filenames in os.walk(top):
            for name in (dirpath, *[os.path.join(dirpath, n) for n in dirnames + filenames]):
                os.lchown(name, NOBODY, NOBODY)


def extra_for(name: str, box: Box) -> tuple[str, ...]:  # noqa: F811
    # .dsh stays protected in the workspace, which landlock cannot hold: accepted, so
    # that what landlock does hold (or reports) is what the test judges.
    return ("--profile", profile(box, LANDLOCK_ACCEPT)) if name == "landlock" else ()


def host_git_status(where: Path) -> None:
    """The host's next ``git status`` there, as the user would run it."""
    subprocess.run(["git", "-c", "safe.directory=*", "status", "--porcelain"], cwd=where,
                   capture_output=True, timeout=60, check=False)


PLANT = (
    "printf '[core]\\n\\tfsmonitor = touch {mark}\\n' >> {git}/config; "
    "printf '#!/bin/sh\\ntouch {mark}\\n' > {git}/hooks/post-checkout; chmod +x {git}/hooks/post-checkout; exit 0"
)


@pytest.mark.parametrize("name", RUNNERS)
def test_repository_deep_in_tmp_is_out_of_reach(name: str, box: Box, shared_tmp: Path) -> None:  # noqa: F811
    runner = runner_for(name, box)
    top = shared_tmp / "ci" / "checkouts" / "app"
    git_dir = repo(top)
    mark = shared_tmp / "planted-ran"
    own(box, shared_tmp)
    box.own()
    ran = box.run(runner, PLANT.format(git=git_dir, mark=mark), *extra_for(name, box))
    assert ran.returncode == 0, ran.err
    changed = (git_dir / "config").read_text() != ORIGINAL or (git_dir / "hooks" / "post-checkout").exists()
    # Kept out, or at the very least named in the report.
    assert not changed or f"{git_dir}/config" in ran.err, ran.err
    host_git_status(top)
    assert not mark.exists(), "the host's git status ran a program the sandboxed run planted"
    assert not changed


@pytest.mark.parametrize("name", RUNNERS)
def test_workspace_inside_a_tmp_repository(name: str, box: Box, shared_tmp: Path) -> None:  # noqa: F811
    runner = runner_for(name, box)
    top = shared_tmp / "repo"
    git_dir = repo(top)
    git(top, *IDENTITY, "commit", "-q", "--allow-empty", "-m", "one")
    ws = top / "sub"
    ws.mkdir()
    own(box, shared_tmp)
    box.own()
    before = (git_dir / "refs" / "heads" / "main").read_text()
    script = (
        "git -c safe.directory='*' rev-parse --show-toplevel; echo pwn >> ../.git/config; "
        "printf '#!/bin/sh\\n' > ../.git/hooks/pre-commit; "
        "git -c safe.directory='*' " + " ".join(IDENTITY) + " commit -q --allow-empty -m two; exit 0"
    )
    ran = box.run(runner, script, "--workspace", str(ws), *extra_for(name, box), cwd=ws)
    assert ran.returncode == 0, ran.err
    # git still finds the repository (a private /tmp shows it again, read-only) ...
    assert ran.out.splitlines()[:1] == [str(top)], ran.out + ran.err
    # ... and cannot change it.
    assert (git_dir / "config").read_text() == ORIGINAL
    assert not (git_dir / "hooks" / "pre-commit").exists()
    assert (git_dir / "refs" / "heads" / "main").read_text() == before
    shown = subprocess.run([*cli("caller"), "profile", "explain", "workspace-write", "--runner", runner,
                            "--workspace", str(ws)], capture_output=True, text=True, timeout=120, check=False)
    assert f"enclosing repository: {top}" in shown.stdout, shown.stdout + shown.stderr
    assert f"  {git_dir}: read-only (outside every writable root)" in shown.stdout


@pytest.mark.parametrize("name", ["bwrap", "docker"])
def test_enclosing_repository_in_a_writable_root_stays_read_only(
    name: str, box: Box, shared_tmp: Path  # noqa: F811
) -> None:
    runner = runner_for(name, box)
    top = shared_tmp / "repo"
    git_dir = repo(top)
    git(top, *IDENTITY, "commit", "-q", "--allow-empty", "-m", "one")
    ws = top / "sub"
    ws.mkdir()
    own(box, shared_tmp)
    box.own()
    before = (git_dir / "refs" / "heads" / "main").read_text()
    script = (
        "echo pwn >> ../.git/config; git -c safe.directory='*' " + " ".join(IDENTITY)
        + " commit -q --allow-empty -m two; echo ok > ../other; exit 0"
    )
    ran = box.run(runner, script, "--workspace", str(ws), "--writable", str(top), cwd=ws)
    assert ran.returncode == 0, ran.err
    assert (top / "other").read_text() == "ok\n"  # the root is writable ...
    assert (git_dir / "config").read_text() == ORIGINAL  # ... its git dir, even with git = "commit", is not
    assert (git_dir / "refs" / "heads" / "main").read_text() == before


@pytest.mark.parametrize("name", RUNNERS)
def test_nothing_is_planted_above_the_workspace(name: str, box: Box, shared_tmp: Path) -> None:  # noqa: F811
    runner = runner_for(name, box)
    above = shared_tmp / "a"
    ws = above / "b" / "ws"
    ws.mkdir(parents=True)
    mark = shared_tmp / "planted-ran"
    own(box, shared_tmp)
    box.own()
    script = (
        f"cd {above}; echo 'touch {mark}' > .envrc; mkdir -p .dsh .vscode; "
        "echo 'mode = \"danger-full-access\"' > .dsh/config.toml; echo '{{}}' > .vscode/tasks.json; "
        f"git init -q . && git config core.fsmonitor 'touch {mark}'; exit 0"
    )
    ran = box.run(runner, script, "--workspace", str(ws), *extra_for(name, box), cwd=ws)
    assert ran.returncode == 0, ran.err
    host_git_status(above / "b")  # a non-repository subdirectory: git looks upwards
    assert not mark.exists()
    for planted in (".envrc", ".dsh", ".vscode", ".git"):
        assert not (above / planted).exists(), planted


@pytest.mark.parametrize("name", RUNNERS)
def test_git_commit_works_in_the_default_profile(name: str, box: Box) -> None:  # noqa: F811
    runner = runner_for(name, box)
    git_dir = repo(box.ws)
    git(box.ws, *IDENTITY, "commit", "-q", "--allow-empty", "-m", "one")
    shutil.rmtree(git_dir / "hooks")  # a repository without hooks: none may be added
    box.own()
    before = (git_dir / "refs" / "heads" / "main").read_text()
    script = (
        "echo hi > f && git add f && git " + " ".join(IDENTITY) + " commit -qm two || exit 9; "
        "mkdir -p .git/hooks; echo x > .git/hooks/pre-commit; echo x >> .git/config; exit 0"
    )
    ran = box.run(runner, script, *extra_for(name, box))
    assert ran.returncode == 0, ran.err
    assert (git_dir / "refs" / "heads" / "main").read_text() != before  # committed
    if name == "landlock":
        # Landlock cannot keep them read-only inside the workspace (the accepted gap): never unreported.
        for rel in ("hooks/pre-commit", "config"):
            assert not (git_dir / rel).exists() or f"{git_dir}/{rel}" in ran.err or rel == "config", rel
        assert f"{git_dir}/config" in ran.err or (git_dir / "config").read_text() == ORIGINAL
        return
    assert (git_dir / "config").read_text() == ORIGINAL
    assert not (git_dir / "hooks" / "pre-commit").exists()


def test_docker_commit_finds_the_users_git_identity(box: Box) -> None:  # noqa: F811
    runner = runner_for("docker", box)
    repo(box.ws)
    (box.ws.parent / ".gitconfig").write_text("[user]\n\tname = Host User\n\temail = host@example.org\n")
    box.own()
    ran = box.run(runner, "git commit -q --allow-empty -m one && git log -1 --format=%an "
                  "&& echo x >> \"$GIT_CONFIG_GLOBAL\"; exit 0")
    assert ran.returncode == 0, ran.err
    assert ran.out.splitlines()[:1] == ["Host User"], ran.out + ran.err
    assert "x" not in (box.ws.parent / ".gitconfig").read_text().splitlines()


@pytest.mark.parametrize("name", RUNNERS)
def test_private_tmp_is_the_sessions_own(name: str, box: Box) -> None:  # noqa: F811
    runner = runner_for(name, box)
    box.own()
    probe = f"/tmp/dsh-tmprepo-{os.getpid()}-{name}-{box.user}"
    script = f'echo x > "$TMPDIR/f" && cat "$TMPDIR/f" && echo "$TMPDIR"; echo y > {probe}; exit 0'
    try:
        ran = box.run(runner, script, *extra_for(name, box))
        leaked = os.path.lexists(probe)
    finally:
        if os.path.lexists(probe):
            os.unlink(probe)
    assert ran.returncode == 0, ran.err
    lines = ran.out.splitlines()
    assert lines[0] == "x", ran.out + ran.err
    private = Path(lines[1])
    assert not str(private).startswith("/tmp/")
    assert not private.exists()  # removed when the session ended
    assert not leaked  # private (bwrap, docker) or not writable (landlock)
