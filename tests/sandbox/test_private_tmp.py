"""The session's private temporary directory and the repository a workspace lies in:
where the directory is made, that it goes with the session, that a link or
another user's directory is never used; what ``explain`` says of the enclosing
repository."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from dsh.cli.policy_text import describe_policy
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.private_tmp import PrivateTmp, candidates

pytestmark = pytest.mark.usefixtures("no_tmpdir")


def test_made_private_outside_the_avoided_roots_and_removed_at_close(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    environ = {"XDG_CACHE_HOME": str(cache), "HOME": str(tmp_path)}
    made = PrivateTmp.create([Path("/var/lib/nowhere")], environ)
    assert made.path.parent == cache / "dsh-sandbox" / "tmp"
    assert made.path.stat().st_mode & 0o777 == 0o700
    (made.path / "d").mkdir()
    (made.path / "d" / "f").write_text("x")
    os.chmod(made.path / "d", 0)  # what a command may leave behind
    made.close()
    assert not made.path.exists()
    made.close()  # idempotent


def test_a_candidate_inside_a_shared_or_writable_directory_is_skipped(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    made = PrivateTmp.create([tmp_path], environ)  # the cache lies in an avoided root
    try:
        assert made.path.parent == candidates(environ, os.geteuid())[-1]
        assert not made.path.is_relative_to(tmp_path)
    finally:
        made.close()


def test_a_link_at_the_base_is_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache" / "dsh-sandbox").mkdir(parents=True)
    (tmp_path / "cache" / "dsh-sandbox" / "tmp").symlink_to(elsewhere)
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    made = PrivateTmp.create([], environ)
    try:
        assert not made.path.is_relative_to(elsewhere) and list(elsewhere.iterdir()) == []
    finally:
        made.close()


def test_a_dead_sessions_directory_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    live = PrivateTmp.create([], environ)
    base = live.path.parent
    dead = base / "session-dead"
    dead.mkdir(mode=0o700)
    (dead / "left").write_text("x")
    old = 1_000_000_000
    os.utime(dead, (old, old))
    # ctime cannot be set back: a child process that holds no lock stands for a
    # session killed long ago, judged by age through a patched clock.
    import dsh.sandbox.private_tmp as module

    real_time = module.time.time
    module.time.time = lambda: real_time() + 3600  # type: ignore[assignment]
    try:
        other = PrivateTmp.create([], environ)
    finally:
        module.time.time = real_time  # type: ignore[assignment]
    try:
        assert not dead.exists()
        assert live.path.exists()  # its session holds the lock
    finally:
        other.close()
        live.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="SANDBOX_UNAVAILABLE: another user's directory needs root")
def test_another_users_base_is_refused_with_the_fix(tmp_path: Path) -> None:
    squatted = tmp_path / "cache" / "dsh-sandbox" / "tmp"
    squatted.mkdir(parents=True)
    os.chown(squatted, 12345, 12345)
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    made = PrivateTmp.create([], environ)  # the next candidate serves
    try:
        assert not made.path.is_relative_to(squatted)
    finally:
        made.close()
    var_tmp = candidates(environ, os.geteuid())[-1]
    with pytest.raises(ConfigError, match='tmp = "shared"'):
        PrivateTmp.create([var_tmp.parent, tmp_path], environ)


def test_the_service_makes_one_per_session_and_removes_it(workspace: Path) -> None:
    ctx = Context()
    service = PolicyService(ctx, PolicyConfig(workspace=str(workspace)))
    ctx.provide(service)
    first = service.resolve().private_tmp
    assert first is not None and first == service.resolve().private_tmp
    assert service.resolve("read-only").private_tmp is None
    ctx.close()
    assert not first.exists()


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True, capture_output=True)


def test_explain_says_what_holds_for_the_enclosing_repository(tmp_path: Path) -> None:
    top = tmp_path / "checkout"
    ws = top / "pkg"
    ws.mkdir(parents=True)
    _git(top, "init", "-q", ".")
    git_dir = top / ".git"
    outside = PolicyService(Context(), PolicyConfig(workspace=str(ws))).resolve()
    lines = describe_policy(outside)
    assert f"enclosing repository: {top}" in lines
    assert f"  {git_dir}: read-only (outside every writable root)" in lines
    assert git_dir not in outside.protected_paths  # nothing to add: not writable at all
    # A root that holds the checkout: the whole git dir is kept, though the profile commits.
    inside = PolicyService(Context(), PolicyConfig(workspace=str(ws), writable=(str(top),))).resolve()
    assert inside.git == "commit" and git_dir in inside.protected_paths
    assert f"  {git_dir}: kept read-only inside writable root {top}" in describe_policy(inside)
