"""The daemon binds by name; the runner checks each bind against the inode
the policy pinned (``runners/docker/verify.py``), from the host through
``/proc/<pid>/root`` or, where that is out of reach, by ``stat`` inside."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.docker.verify import check_container, stat_in
from dsh.sandbox.errors import SandboxUnavailable

from tests.runners.docker.helpers import container_of, docker_runner, policy, run


def test_the_check_sees_the_bind_and_refuses_another_inode(workspace: Path) -> None:
    with docker_runner() as runner:
        assert run(runner, ["true"], policy(workspace)).status.exit_code == 0
        client = runner._docker()
        container = client.containers.get(container_of(runner))
        pid = client.api.inspect_container(container.id)["State"]["Pid"]
        host = os.stat(workspace)
        pinned = {str(workspace): (host.st_dev, host.st_ino)}
        def inside(targets: list[str]) -> dict[str, tuple[int, int]]:
            return stat_in(container, targets)

        # Both views of the bind agree with the host's inode.
        assert inside([str(workspace)]) == pinned
        check_container(pid, pinned, inside)
        # Another inode than the pinned one is refused, naming the path.
        wrong = {str(workspace): (host.st_dev, host.st_ino + 1)}
        with pytest.raises(SandboxUnavailable, match=str(workspace)):
            check_container(pid, wrong, inside)
        # The right inode at a path that is not where the bind is mounted (a
        # target moved by a symlink swap) is refused too.
        (workspace / "sub").mkdir()
        sub = os.stat(workspace / "sub")
        with pytest.raises(SandboxUnavailable, match="not mounted at its own path"):
            check_container(pid, {str(workspace / "sub"): (sub.st_dev, sub.st_ino)}, inside)
        # Out of reach from the host (another user's container): asked inside.
        real_stat = os.stat

        def no_proc(path: str, *args: object, **kwargs: object) -> os.stat_result:
            if str(path).startswith("/proc/"):
                raise PermissionError(13, "Permission denied")
            return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "stat", no_proc)
            check_container(pid, pinned, inside)
            with pytest.raises(SandboxUnavailable, match=str(workspace)):
                check_container(pid, wrong, inside)
