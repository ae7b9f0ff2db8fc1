"""A workspace swapped for a symlink while the container starts leaves
nothing in the directory the daemon bound instead.

runc makes the mount point of every nested mount (a protected ``.git``, the
placeholder of a missing ``.dsh``, a hidden path's mask) inside the directory
it bound above it.  If a concurrent run exchanged the workspace's name with a
link to a directory outside every root after the daemon's last look, runc
binds that directory and makes those mount points in it: the runner refuses
the container, and must also take back what the daemon made there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.docker.runner import DockerRunner
from dsh.sandbox.errors import SandboxUnavailable

from tests.runners.docker.helpers import docker_runner, policy, run


def _swap_after_create(runner: DockerRunner, patch: pytest.MonkeyPatch, workspace: Path, aside: Path,
                       outside: Path, swapped: list[bool]) -> None:
    """Once, between the daemon's create and its start (where runc binds by
    name): the workspace moved aside and a link to ``outside`` in its place."""
    real_add = runner._keeper.add

    def add_then_swap(container_id: str) -> None:
        real_add(container_id)
        if not swapped:
            workspace.rename(aside)
            workspace.symlink_to(outside)
            swapped.append(True)

    patch.setattr(runner._keeper, "add", add_then_swap)


def test_a_swap_before_the_start_leaves_nothing_outside(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    for top in (workspace, outside):
        # The daemon checks at start that each bind source exists: the swapped-in
        # directory has them (a racing command can arrange that, or win the
        # narrower race after the daemon's check).
        (top / ".git").mkdir(parents=True)
        (top / ".dsh").mkdir()
    (outside / "keep").mkdir()  # an empty directory that was there before stays
    (workspace / "secret").mkdir()
    (workspace / "token").write_text("t")
    before = sorted(os.listdir(outside))
    aside = tmp_path / "ws.real"
    swapped: list[bool] = []
    pol = policy(workspace, hidden_paths=(workspace / "secret", workspace / "token"))
    with docker_runner() as runner, pytest.MonkeyPatch.context() as patch:
        _swap_after_create(runner, patch, workspace, aside, outside, swapped)
        with pytest.raises(SandboxUnavailable, match="changed while the container was being made"):
            run(runner, ["true"], pol)
        assert swapped
        assert sorted(os.listdir(outside)) == before, "the daemon's mount points stayed outside"
    workspace.unlink()
    aside.rename(workspace)


def test_a_swap_to_a_directory_without_the_placeholders_is_refused_by_the_bind_check(tmp_path: Path) -> None:
    """The placeholders of missing protected paths are bound from the runner's
    own empty directory, not by a name under the workspace: a swapped-in
    directory that lacks them does not fail the start midway (runc would have
    made the earlier ones' mount points there, with no container left to find
    them through); the start goes on, the bind check refuses it, and what runc
    made there is taken back."""
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "keep").mkdir()
    before = sorted(os.listdir(outside))
    aside = tmp_path / "ws.real"
    swapped: list[bool] = []
    missing = (workspace / ".dsh", workspace / ".idea", workspace / ".vscode")
    pol = policy(workspace, protected_paths=missing)
    with docker_runner() as runner, pytest.MonkeyPatch.context() as patch:
        _swap_after_create(runner, patch, workspace, aside, outside, swapped)
        with pytest.raises(SandboxUnavailable, match="changed while the container was being made") as refused:
            run(runner, ["true"], pol)
        assert swapped
        assert "could not be removed" not in str(refused.value)
        assert sorted(os.listdir(outside)) == before, "the daemon's mount points stayed outside"
        workspace.unlink()
        aside.rename(workspace)
    assert sorted(os.listdir(workspace)) == [], "the placeholders stayed in the workspace"


def test_a_nested_bind_whose_name_leads_elsewhere_at_the_start_is_refused(tmp_path: Path) -> None:
    """The daemon resolves a nested bind's source (a protected ``.git``) by
    name at its own moment, as it does the workspace's: a ``.git`` exchanged
    for a link to another repository's after the checks before the container
    was made must not be bound in its place (writable in commit mode, that
    other repository's hooks and config are the host's next ``git status``)."""
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    other = tmp_path / "other-repo" / ".git"
    other.mkdir(parents=True)
    (other / "HEAD").write_text("ref: refs/heads/main\n")
    before = sorted(os.listdir(other))
    pol = policy(workspace, protected_paths=(workspace / ".git",))
    swapped: list[bool] = []
    with docker_runner() as runner, pytest.MonkeyPatch.context() as patch:
        real_add = runner._keeper.add

        def add_then_swap(container_id: str) -> None:
            real_add(container_id)
            if not swapped:
                (workspace / ".git").rename(workspace / ".git.real")
                (workspace / ".git").symlink_to(other)
                swapped.append(True)

        patch.setattr(runner._keeper, "add", add_then_swap)
        with pytest.raises(SandboxUnavailable, match=r"\.git changed while the container was being made"):
            run(runner, ["sh", "-c", "echo pwned > .git/commondir"], pol)
        assert swapped
    assert sorted(os.listdir(other)) == before, "the other repository's .git was written"
