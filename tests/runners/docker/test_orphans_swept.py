"""What a command leaves behind in the warm container dies when it exits,
before the host scans the workspace.

``env -i setsid`` drops the exec marker and leaves the command's tree: the
daemon is reparented to the container's init and used to live on until the
session closed, long enough to write ``.git/commondir`` after the host's
post-run scan.  After each command every orphan is killed (all of init's
children but the keep-alive); a live concurrent command is spared.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.executors import run, start
from tests.support.sandboxed import need_runner, sandbox_ctx

DAEMON = ("env -i setsid /bin/sh -c 'while [ ! -e go ]; do sleep 0.05; done; echo late > late' dsh-late-daemon "
          "</dev/null >/dev/null 2>&1 & echo planted")
LIST = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -o 'dsh-late-[d]aemon' | wc -l"


def test_an_env_i_setsid_daemon_dies_with_its_command(workspace: Path) -> None:
    need_runner("docker")
    with sandbox_ctx(workspace, runner="docker") as ctx:
        other = start(ctx, "sleep 60; echo survived")  # a concurrent command: not an orphan
        planted = run(ctx, DAEMON)
        assert planted.stdout.text == "planted\n", planted
        listed = run(ctx, LIST)
        assert listed.stdout.text.strip() == "0", "the daemon outlived its command"
        (workspace / "go").touch()  # a daemon still alive would write now
        alive = run(ctx, "ps -eo args | grep -c '^sleep 60'")
        assert alive.stdout.text.strip() == "1", "a concurrent command was killed as an orphan"
        other.kill()
    assert not (workspace / "late").exists()


def test_a_container_of_a_policy_no_longer_used_is_removed(workspace: Path) -> None:
    """A command under another policy: the old container (its old mounts, what
    runs in it) goes once no command runs in it, not at the session's end."""
    import docker  # type: ignore[import-untyped]
    from dsh.sandbox.modes import SandboxMode

    from tests.runners.docker.helpers import docker_runner, policy, sh
    from tests.runners.docker.helpers import start as start_in

    client = docker.from_env()
    with docker_runner() as runner:
        writable = policy(workspace)
        assert sh(runner, "true", writable).returncode == 0
        first = [w.id for w in runner._warm.values()]
        busy, reader = start_in(runner, ["/bin/sleep", "60"], writable)
        assert sh(runner, "true", policy(workspace, SandboxMode.READ_ONLY)).returncode == 0
        assert client.containers.get(first[0]).status == "running", "removed under a running command"
        busy.kill(9)
        reader.finish()
        assert sh(runner, "true", policy(workspace, SandboxMode.READ_ONLY)).returncode == 0
        assert len(runner._warm) == 1
        gone = [c for c in client.containers.list(all=True) if c.id == first[0]]
        assert gone == [], "the old policy's container is still there"
