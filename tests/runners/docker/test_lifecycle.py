"""Container lifecycle and bad input: teardown, crash leftovers, daemon and image errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dsh.runners.docker import DockerRunner, prune_containers
from dsh.runners.docker.client import connect
from dsh.runners.docker.spec import EXEC_SETUP_PROCESSES, PIDS_OVERHEAD
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.policy import ResourceLimits

from tests.runners.docker.helpers import container_of, docker_runner, policy, run, start
from tests.support.require import require_runner
from tests.support.wait import PATIENCE_S


def _exists(container_id: str) -> bool:
    from docker.errors import NotFound

    client = connect()
    try:
        client.api.inspect_container(container_id)
        return True
    except NotFound:
        return False
    finally:
        client.close()


def test_container_is_labelled_hardened_and_removed_at_close(workspace: Path) -> None:
    with docker_runner() as runner:
        run(runner, ["true"], policy(workspace))
        cid = container_of(runner)
        client = connect()
        info = client.api.inspect_container(cid)
        client.close()
        host = info["HostConfig"]
        assert info["Config"]["Labels"]["dsh-sandbox"] == "1"
        assert info["Config"]["Labels"]["dsh-sandbox.owner-pid"] == str(os.getpid())
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"][0] == "no-new-privileges"
        assert [opt.split("=", 1)[0] for opt in host["SecurityOpt"]] == ["no-new-privileges", "seccomp"]
        assert host["PidsLimit"] == 1024 + PIDS_OVERHEAD and host["Init"] is True  # init and keep-alive too
        assert info["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
    assert not _exists(cid)


CRASHER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from dsh.runners.docker import DockerRunner
    from dsh.sandbox.modes import SandboxMode
    from dsh.sandbox.policy import SandboxPolicy
    ws = Path(sys.argv[1])
    pol = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                        protected_paths=(ws / ".git",))
    runner = DockerRunner()
    runner.prepare(["true"], pol, cwd=str(ws), env={})
    print(json.dumps([[w.name for w in runner._warm.values()], runner._keeper.pid]), flush=True)
    time.sleep(3600)
""")


def test_prune_removes_the_leftovers_of_a_killed_executor(workspace: Path) -> None:
    with docker_runner() as runner:
        run(runner, ["true"], policy(workspace))  # a live owner: must survive the prune
        own = container_of(runner)
        crasher = subprocess.Popen([sys.executable, "-P", "-c", CRASHER, str(workspace)],
                                   stdout=subprocess.PIPE, text=True)
        try:
            assert crasher.stdout is not None
            names, keeper = json.loads(crasher.stdout.readline())
            # The keeper would remove the container at the crasher's death: it dies first.
            os.kill(keeper, signal.SIGKILL)
        finally:
            crasher.send_signal(signal.SIGKILL)  # no close(): the container stays behind
            crasher.wait(PATIENCE_S)
        assert len(names) == 1 and _exists(names[0])
        assert (workspace / ".git").is_dir()  # its placeholder, left behind too
        removed = prune_containers()
        assert names[0] in removed
        assert not _exists(names[0])
        assert not (workspace / ".git").exists()
        assert _exists(own)


def test_container_gone_mid_command_gives_a_clear_result(workspace: Path) -> None:
    with docker_runner() as runner:
        _, reader = start(runner, ["/bin/sh", "-c", "echo ready; exec sleep 4280"],
                             policy(workspace))
        assert reader.first_line.wait(PATIENCE_S)
        client = connect()
        client.api.remove_container(container_of(runner), force=True)
        client.close()
        result = reader.finish()
        assert result.status.exit_code is None and result.status.signal == signal.SIGKILL
        # The next command gets a fresh container.
        assert run(runner, ["echo", "again"], policy(workspace)).stdout == b"again\n"


def test_unreachable_daemon_is_unavailable_with_the_reason(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    runner = DockerRunner()
    probe = runner.probe()
    assert not probe.available
    assert probe.reason is not None
    assert "not reachable at unix:///nonexistent.sock" in probe.reason
    assert "dockerd" in probe.reason
    with pytest.raises(SandboxUnavailable, match="not reachable") as err:
        runner.prepare(["true"], policy(workspace), cwd=str(workspace), env={})
    assert err.value.code == "SANDBOX_UNAVAILABLE"
    with pytest.raises(SandboxUnavailable, match="not reachable"):
        prune_containers()


def test_missing_image_names_it_and_how_to_build_it(workspace: Path) -> None:
    require_runner("docker")  # a daemon is needed to know the image is missing
    runner = DockerRunner({"image": "dsh-sandbox/no-such-image:h5"})
    probe = runner.probe()
    assert not probe.available and probe.reason is not None
    assert "dsh-sandbox/no-such-image:h5" in probe.reason
    assert "dsh-sandbox image build" in probe.reason
    with pytest.raises(SandboxUnavailable, match=r"no-such-image:h5.*dsh-sandbox image build"):
        runner.prepare(["true"], policy(workspace), cwd=str(workspace), env={})
    runner.close()


def test_limits_the_daemon_refuses_are_named(workspace: Path) -> None:
    """Limits below what the daemon or the container's own processes need
    (profiles cannot ask for them; a policy built by hand can) give an error
    naming the limit and the fix, not the daemon's words alone."""
    with docker_runner() as runner:
        tiny_memory = policy(workspace, limits=ResourceLimits(max_memory_bytes=4096))
        with pytest.raises(SandboxUnavailable) as info:
            runner.prepare(["true"], tiny_memory, cwd=str(workspace), env={})
        assert "max_memory = 4096 bytes" in str(info.value) and "[limits]" in str(info.value)
    # max_processes = 0 is not below the container's own needs (they are added
    # to the limit): the command starts, and can start no more than the room
    # each exec's setup needs.
    with docker_runner() as runner:
        no_processes = policy(workspace, limits=ResourceLimits(max_processes=0))
        for _attempt in range(3):
            forked = run(runner, ["sh", "-c", _sleepers(EXEC_SETUP_PROCESSES + 1)], no_processes)
            # runc's own setup can still find no room under a limit this small
            # and fail before the command exists (see EXEC_SETUP_PROCESSES):
            # that says nothing about the command's forks, so run it again.
            if not (forked.status.exit_code == 126 and b"unable to start container process" in forked.stdout):
                break
        assert b"fork" in forked.stderr.lower(), (forked.stdout, forked.stderr)


def test_max_processes_counts_the_command_only(workspace: Path) -> None:
    """Docker's init and keep-alive (a shell and its sleep) share the pids
    limit: the smallest limit a profile accepts still lets a shell run a
    pipeline, and ``max_processes`` is what the command itself may hold."""
    limited = policy(workspace, limits=ResourceLimits(max_processes=4))
    with docker_runner() as runner:
        result = run(runner, ["sh", "-c", "ls / | wc -l"], limited)
        assert result.status.exit_code == 0, result.stderr
        assert int(result.stdout) > 3
        # The shell and 3 sleeps: the 4 the policy grants.
        four = run(runner, ["sh", "-c", _sleepers(3)], limited)
        assert b"waited" in four.stdout and b"fork" not in four.stderr.lower(), four.stderr
        # Beyond the room each exec's setup needs (free once the command runs), no more.
        over = run(runner, ["sh", "-c", _sleepers(3 + EXEC_SETUP_PROCESSES + 1)], limited)
        assert b"fork" in over.stderr.lower(), (over.stdout, over.stderr)


def _sleepers(count: int) -> str:
    return "sleep 1 & " * count + "wait; echo waited"


@pytest.mark.parametrize("options, field", [
    ({"image": "Bad Image!"}, "image"),
    ({"image": "UPPER/case"}, "image"),
    ({"image": ""}, "image"),
    ({"memory": "lots"}, "memory"),
    ({"memory": "1k"}, "memory"),
    ({"memory": "8m"}, "memory"),
    ({"pids": 3}, "pids"),
    ({"pids": 0}, "pids"),
    ({"pids": "many"}, "pids"),
    ({"user": "root; rm -rf /"}, "user"),
    ({"imgae": "typo"}, "imgae"),
])
def test_bad_options_are_config_errors_naming_the_field(options: dict[str, object],
                                                        field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        DockerRunner(options)


def test_good_options_are_accepted() -> None:
    runner = DockerRunner({"image": "localhost:5000/team/img:v1.2", "memory": "512m",
                           "pids": None, "user": "1000:1000"})
    assert runner.memory == 512 * 1024 * 1024 and runner.pids is None


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_importing_the_runner_does_not_load_the_sdk() -> None:
    result = _python("""
        import sys
        from dsh.runners.docker import DockerRunner, prune_containers
        DockerRunner({"image": "dsh-sandbox/runtime:latest"})
        print("docker" in sys.modules)
    """)
    assert result.stdout == "False\n", result.stderr


def test_missing_sdk_is_unavailable_with_the_install_hint() -> None:
    result = _python("""
        import sys
        sys.modules["docker"] = None  # as if the docker extra were not installed
        from dsh.runners.docker import DockerRunner
        print(DockerRunner().probe().reason)
    """)
    assert "pip install 'dsh-sandbox[docker]'" in result.stdout, result.stderr
