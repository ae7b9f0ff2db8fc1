"""Filesystem attacks against the bwrap runner; each checks the host afterwards."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.bwrap.helpers import BOTH_MODES, Layout, policy, sh

ORIGINAL = "original\n"


def git_config_intact(layout: Layout) -> None:
    assert (layout.ws / ".git" / "config").read_text() == ORIGINAL
    assert sorted(os.listdir(layout.ws / ".git")) == ["config"]


def test_workspace_write_writes_workspace_only(runner: BwrapRunner, layout: Layout) -> None:
    etc_target = f"/etc/dsh-bwrap-{uuid.uuid4().hex}"
    script = f"""
        echo made > new.txt || exit 10
        echo x > {layout.outside}/x && exit 11
        echo x > {layout.outside}/keep.txt && exit 12
        echo x > {etc_target} && exit 13
        echo x > {layout.root}/sibling && exit 14
        echo x > /dev/null || exit 15
        exit 0
    """
    result = sh(runner, script, policy(layout.ws))
    assert result.returncode == 0, result.err
    assert (layout.ws / "new.txt").read_text() == "made\n"
    assert not (layout.outside / "x").exists()
    assert (layout.outside / "keep.txt").read_text() == "keep\n"
    assert not os.path.lexists(etc_target)
    assert not (layout.root / "sibling").exists()
    assert "Read-only file system" in result.err


def test_read_only_writes_nothing_but_dev_null(runner: BwrapRunner, layout: Layout) -> None:
    script = f"""
        echo x > new.txt && exit 10
        echo x > /tmp/dsh-bwrap-ro-{uuid.uuid4().hex} && exit 11
        mkdir newdir && exit 12
        echo x > /dev/null || exit 13
        cat .git/config >/dev/null || exit 14
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, SandboxMode.READ_ONLY))
    assert result.returncode == 0, result.err
    assert sorted(os.listdir(layout.ws)) == [".git"]


@BOTH_MODES
def test_protected_path_direct_write_and_removal(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    script = """
        echo x > .git/config && exit 10
        echo x >> .git/config && exit 11
        echo x > .git/hooks && exit 12
        rm -rf .git
        test -f .git/config || exit 13
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    git_config_intact(layout)


@BOTH_MODES
def test_protected_path_via_symlink_and_hardlink(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    script = """
        ln -s .git/config lnk; echo x > lnk && exit 10
        ln -s .git g; echo x > g/config && exit 11
        ln -s "$PWD/.git" /tmp/dsh-link-$$ 2>/dev/null; echo x > /tmp/dsh-link-$$/config && exit 12
        ln .git/config hard && exit 13
        test -e hard && { echo x > hard && exit 14; }
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    git_config_intact(layout)
    assert not (layout.ws / "hard").exists()


def test_protected_path_via_renamed_parent(runner: BwrapRunner, layout: Layout) -> None:
    """A renamed parent must not unprotect the path, nor let a fresh one be created."""
    sub = layout.ws / "sub"
    (sub / ".git").mkdir(parents=True)
    (sub / ".git" / "config").write_text(ORIGINAL)
    script = """
        mv .git g2 && echo x > g2/config && exit 10
        mv sub sub2 && exit 11
        mkdir -p sub/.git/hooks && exit 12
        echo x > sub/.git/config && exit 13
        exit 0
    """
    pol = policy(layout.ws, protected=(".git", ".dsh", "sub/.git"))
    result = sh(runner, script, pol)
    assert result.returncode == 0, result.err
    git_config_intact(layout)
    assert (sub / ".git" / "config").read_text() == ORIGINAL
    assert sorted(os.listdir(layout.ws)) == [".git", "sub"]
    assert "Device or resource busy" in result.err


def test_renaming_the_workspace_inside_writable_tmp_fails(runner: BwrapRunner, layout: Layout) -> None:
    """With /tmp writable, the workspace's own ancestors are pinned too."""
    moved = layout.root.with_name(layout.root.name + "-moved")
    script = f"""
        echo ok > /tmp/dsh-bwrap-tmp-$$ || exit 9
        rm -f /tmp/dsh-bwrap-tmp-$$
        mv {layout.ws} {layout.root}/ws2 && exit 10
        mv {layout.root} {moved} && exit 11
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, roots=(layout.ws, Path("/tmp"))))
    assert result.returncode == 0, result.err
    assert not moved.exists()
    git_config_intact(layout)


@BOTH_MODES
def test_missing_protected_paths_cannot_be_created(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    (layout.ws / ".git" / "config").unlink()
    (layout.ws / ".git").rmdir()
    script = """
        mkdir .git && exit 10
        mkdir -p .git/hooks && exit 11
        echo x > .dsh && exit 12
        mkdir -p .dsh/x && exit 13
        mkdir -p a/b/c && exit 14
        git init -q . 2>/dev/null && exit 15
        exit 0
    """
    pol = policy(layout.ws, mode, protected=(".git", ".dsh", "a/b/c"))
    result = sh(runner, script, pol)
    assert result.returncode == 0, result.err
    # The placeholders are gone again: the workspace is exactly as it was.
    assert os.listdir(layout.ws) == []


def test_placeholders_are_shared_and_removed_by_the_last_run(runner: BwrapRunner, layout: Layout) -> None:
    pol = policy(layout.ws)
    first = runner.prepare(["true"], pol, cwd=str(layout.ws), env={})
    second = runner.prepare(["true"], pol, cwd=str(layout.ws), env={})
    assert first.cleanup is not None and second.cleanup is not None
    placeholder = layout.ws / ".dsh"
    assert placeholder.is_dir()
    first.cleanup()
    assert placeholder.is_dir(), "removed while another sandbox still relied on it"
    second.cleanup()
    assert not placeholder.exists()


def test_leftover_placeholder_is_adopted_and_removed(runner: BwrapRunner, layout: Layout) -> None:
    leftover = layout.ws / ".dsh"
    leftover.mkdir(mode=0o555)
    leftover.chmod(0o555)
    result = sh(runner, "mkdir .dsh/x && exit 10; exit 0", policy(layout.ws))
    assert result.returncode == 0, result.err
    assert not leftover.exists()


@BOTH_MODES
def test_dotdot_and_proc_self_traversal(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    out = layout.outside
    script = f"""
        echo x > ../outside/a && exit 10
        echo x > /proc/self/root{out}/b && exit 11
        echo x > /proc/self/cwd/../outside/c && exit 12
        echo x > /proc/self/cwd/.git/config && exit 13
        echo x > /proc/self/root{layout.ws}/.git/config && exit 14
        cd /proc/self/cwd/.. && echo x > outside/d && exit 15
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    assert sorted(os.listdir(out)) == ["keep.txt"]
    git_config_intact(layout)


@BOTH_MODES
def test_dev_shm_is_private(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    name = f"dsh-bwrap-{uuid.uuid4().hex}"
    result = sh(runner, f"echo x > /dev/shm/{name}; exit 0", policy(layout.ws, mode))
    assert result.returncode == 0, result.err
    assert not os.path.lexists(f"/dev/shm/{name}")


def test_read_only_path_inside_workspace(runner: BwrapRunner, layout: Layout) -> None:
    docs = layout.ws / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("a\n")
    script = "echo x > docs/a.txt && exit 10; echo x > docs/b && exit 11; echo ok > c.txt"
    result = sh(runner, script, policy(layout.ws, read_only=(docs,)))
    assert result.returncode == 0, result.err
    assert (docs / "a.txt").read_text() == "a\n"
    assert sorted(os.listdir(docs)) == ["a.txt"]
    assert (layout.ws / "c.txt").read_text() == "ok\n"


@BOTH_MODES
def test_hidden_paths_are_unreadable(runner: BwrapRunner, layout: Layout, mode: SandboxMode) -> None:
    secret_dir = layout.outside / "secrets"
    secret_dir.mkdir()
    (secret_dir / "key").write_text("TOPSECRET\n")
    secret_file = layout.ws / ".env"
    secret_file.write_text("TOKEN=TOPSECRET\n")
    script = f"""
        cat {secret_dir}/key; cat .env; ls -A {secret_dir}
        echo x > {secret_dir}/new && exit 10
        exit 0
    """
    result = sh(runner, script, policy(layout.ws, mode, hidden=(secret_dir, secret_file)))
    assert result.returncode == 0, result.err
    assert "TOPSECRET" not in result.out
    assert "key" not in result.out
    assert sorted(os.listdir(secret_dir)) == ["key"]
    assert secret_file.read_text() == "TOKEN=TOPSECRET\n"


def test_symlinked_protected_path_is_a_named_degradation(runner: BwrapRunner, layout: Layout) -> None:
    """``.git`` -> ``realgit``: the target is protected; the replaceable link is reported."""
    real = layout.ws / "realgit"
    (layout.ws / ".git").rename(real)
    (layout.ws / ".git").symlink_to("realgit")
    pol = policy(layout.ws)
    enforcement = runner.enforcement(pol)
    assert enforcement.level == "partial"
    assert enforcement.degradations == ("bwrap-protected-symlink",)
    from dsh.sandbox.errors import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="bwrap-protected-symlink"):
        runner.prepare(["true"], pol, cwd=str(layout.ws), env={})
    accepted = policy(layout.ws, accept=("bwrap-protected-symlink",))
    script = "echo x > .git/config && exit 10; echo x > realgit/config && exit 11; exit 0"
    result = sh(runner, script, accepted)
    assert result.returncode == 0, result.err
    assert (real / "config").read_text() == ORIGINAL


def test_writable_root_inside_a_hidden_directory(runner: BwrapRunner, layout: Layout) -> None:
    """Hidden wins: a root inside a hidden tree is not bound back on top of the mask."""
    (layout.outside / "secret.txt").write_text("TOPSECRET\n")
    inner = layout.outside / "inner"
    inner.mkdir()
    (inner / "also-secret").write_text("TOPSECRET\n")
    script = f"""
        cat {layout.outside}/secret.txt {inner}/also-secret
        echo x > {layout.outside}/new && exit 11
        echo ok > {inner}/made && exit 12
        exit 0
    """
    pol = policy(layout.ws, roots=(layout.ws, inner), hidden=(layout.outside,))
    result = sh(runner, script, pol)
    assert result.returncode == 0, result.err
    assert "TOPSECRET" not in result.out
    assert sorted(os.listdir(layout.outside)) == ["inner", "keep.txt", "secret.txt"]
    assert sorted(os.listdir(inner)) == ["also-secret"]
    assert any("inside hidden" in line for line in runner.explain(pol).rules)
