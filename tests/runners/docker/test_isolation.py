"""What the container enforces per mode; every attack is checked on the host afterwards."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from dsh.runners.docker.spec import PIDS_OVERHEAD
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits

from tests.runners.docker.helpers import docker_runner, policy, run, sh


def test_workspace_write_writes_only_the_workspace(workspace: Path) -> None:
    name = f"dsh-h5-{uuid.uuid4().hex}"
    with docker_runner() as runner:
        result = sh(runner, f"echo hi > inside; echo x > /etc/{name}; echo x > /{name}; "
                    f"echo x > /usr/{name}; echo x > /tmp/{name} && echo tmp-ok",
                    policy(workspace))
    assert (workspace / "inside").read_bytes() == b"hi\n"
    assert result.stderr.count(b"Read-only file system") == 3, result.stderr
    assert b"tmp-ok" in result.stdout  # the container's private /tmp
    assert not Path(f"/tmp/{name}").exists()  # ... is not the host's


def test_read_only_mode_can_read_but_not_write_the_workspace(workspace: Path) -> None:
    (workspace / "data").write_text("secret-ish\n")
    with docker_runner() as runner:
        result = sh(runner, "cat data; echo x > data; touch new; rm data; touch /tmp/x",
                    policy(workspace, SandboxMode.READ_ONLY))
    assert result.stdout == b"secret-ish\n"
    assert result.stderr.count(b"Read-only file system") == 4, result.stderr
    assert (workspace / "data").read_text() == "secret-ish\n"
    assert sorted(os.listdir(workspace)) == ["data"]


def test_rest_of_the_host_is_invisible(workspace: Path, tmp_path: Path) -> None:
    sibling = tmp_path / "sibling"
    sibling.write_text("not for the sandbox")
    with docker_runner() as runner:
        result = sh(runner, f"cat {sibling}; ls /root /home", policy(workspace))
    assert b"No such file" in result.stderr
    assert b"not for the sandbox" not in result.stdout


def test_danger_full_access_has_a_writable_root(workspace: Path) -> None:
    with docker_runner() as runner:
        result = sh(runner, "echo x > /etc/dsh-h5-full && echo ok",
                    policy(workspace, SandboxMode.DANGER_FULL_ACCESS))
    assert result.stdout == b"ok\n"


def test_existing_protected_path_resists_attacks(workspace: Path) -> None:
    git = workspace / ".git"
    git.mkdir()
    (git / "config").write_text("[core]\n")
    attacks = [
        "echo evil >> .git/config",
        "rm -rf .git",
        "mv .git gone",
        "touch .git/hooks-new",
        "ln .git/config hard && echo evil >> hard",  # a hardlink crosses the mount: EXDEV
        "ln -s .git/config soft && echo evil >> soft",
        "cd .git && echo evil > ../.git/config",
    ]
    with docker_runner() as runner:
        for attack in attacks:
            sh(runner, attack, policy(workspace, protected_paths=(git,)))
        listing = sh(runner, "ls -a .git", policy(workspace, protected_paths=(git,))).stdout
    assert listing == b".\n..\nconfig\n"
    assert (git / "config").read_text() == "[core]\n"
    assert not (workspace / "hard").exists() and not (workspace / "gone").exists()


def test_missing_protected_path_cannot_be_created(workspace: Path) -> None:
    dsh = workspace / ".dsh"
    nested = workspace / "sub" / "deeper" / ".dsh"  # its parents are missing too
    (workspace / "dir").mkdir()
    attacks = ["mkdir .dsh", "touch .dsh/x", "ln -s /tmp .dsh/link", "mv dir .dsh",
               "rmdir .dsh", "mkdir -p sub/deeper/.dsh", "echo x > sub/file"]
    pol = policy(workspace, protected_paths=(dsh, nested))
    with docker_runner() as runner:
        results = [sh(runner, attack, pol) for attack in attacks]
        # While the container lives, empty read-only placeholders hold the names.
        assert sorted(os.listdir(workspace)) == [".dsh", "dir", "sub"]
        assert os.listdir(dsh) == [] and os.listdir(workspace / "sub") == []
    assert all(r.status.exit_code != 0 for r in results), [r.stderr for r in results]
    # The placeholders are removed with the container; nothing is left behind.
    assert sorted(os.listdir(workspace)) == ["dir"]


def test_hidden_paths_read_as_empty(workspace: Path) -> None:
    (workspace / "secret.txt").write_text("password")
    (workspace / "keys").mkdir()
    (workspace / "keys" / "id").write_text("private key")
    pol = policy(workspace, hidden_paths=(workspace / "secret.txt", workspace / "keys"))
    with docker_runner() as runner:
        result = sh(runner, "cat secret.txt; ls -A keys; cat keys/id", pol)
    assert b"password" not in result.stdout and b"private key" not in result.stdout
    assert (workspace / "secret.txt").read_text() == "password"


def test_network_off_leaves_only_loopback(workspace: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    probe = f"ls /sys/class/net; echo hi > /dev/tcp/127.0.0.1/{port} && echo connected"
    try:
        with docker_runner() as runner:
            off = sh(runner, probe, policy(workspace))
            assert off.stdout == b"lo\n"
            try:
                listener.accept()
                raise AssertionError("a sandboxed command reached the host's loopback")
            except BlockingIOError:
                pass
            # The same probe with the network on (host network) does connect,
            # so the check above can fail.
            on = sh(runner, probe, policy(workspace, network=True))
            assert on.stdout.endswith(b"connected\n")
            listener.setblocking(True)
            listener.settimeout(60)
            listener.accept()[0].close()
    finally:
        listener.close()


def test_files_keep_the_host_users_ownership(workspace: Path) -> None:
    shared = workspace / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with docker_runner() as runner:
        sh(runner, "echo x > mine", policy(workspace))
    with docker_runner({"user": "65534:65534"}) as runner:
        result = sh(runner, "id -u; echo x > shared/theirs", policy(workspace))
    assert (workspace / "mine").stat().st_uid == os.getuid()
    assert (workspace / "mine").stat().st_gid == os.getgid()
    assert result.stdout == b"65534\n"
    assert (shared / "theirs").stat().st_uid == 65534


def test_limits_reach_the_container(workspace: Path) -> None:
    limits = ResourceLimits(max_processes=64, max_memory_bytes=256 * 1024 * 1024,
                            max_file_size_bytes=4096)
    read = ("cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max "
            "/sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null; "
            "head -c 10000 /dev/zero > big; echo rc=$?")
    with docker_runner() as runner:
        result = sh(runner, read, policy(workspace, limits=limits))
    lines = result.stdout.decode().split()
    assert lines[:2] == [str(64 + PIDS_OVERHEAD), str(256 * 1024 * 1024)]  # docker init + keep-alive count too
    assert lines[2] != "rc=0"  # SIGXFSZ or EFBIG at the file size limit
    assert (workspace / "big").stat().st_size == 4096


def test_no_capabilities_and_no_new_privileges(workspace: Path) -> None:
    with docker_runner() as runner:
        status = sh(runner, "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status",
                    policy(workspace)).stdout.decode()
    assert "CapEff:\t0000000000000000" in status
    assert "CapBnd:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status


def test_workspace_is_at_the_same_path(workspace: Path) -> None:
    with docker_runner() as runner:
        result = run(runner, ["pwd"], policy(workspace))
    assert result.stdout == f"{workspace}\n".encode()


def test_workspace_with_a_fifo_and_a_socket(workspace: Path) -> None:
    fifo = workspace / "fifo"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(workspace / "sock"))
    try:
        pol = policy(workspace, protected_paths=(fifo,), hidden_paths=(workspace / "sock",))
        with docker_runner() as runner:
            result = sh(runner, "ls -l fifo sock | cut -c1; rm fifo; rm sock; "
                        "echo x > /dev/null > fifo.new && echo made", pol)
        # The fifo stays a fifo (read-only); the hidden socket reads as /dev/null.
        assert result.stdout.decode().split() == ["p", "c", "made"]
        assert fifo.exists() and (workspace / "sock").exists()  # both were read-only mounts
    finally:
        server.close()


def test_protected_path_replaced_on_the_host_stays_protected(workspace: Path) -> None:
    # A bind holds an inode: after the host swaps .git for a new directory the
    # warm container would protect the old one, so the runner makes a new one.
    import shutil

    git = workspace / ".git"
    pol = policy(workspace, protected_paths=(git,))
    with docker_runner() as runner:
        assert sh(runner, "touch .git/x", pol).status.exit_code != 0  # a placeholder now
        shutil.rmtree(git)
        git.mkdir()
        (git / "config").write_text("[core]\n")
        result = sh(runner, "rm -rf .git; echo evil > .git/config", pol)
        assert result.status.exit_code != 0
        assert (git / "config").read_text() == "[core]\n"
        shutil.rmtree(git)  # and a missing one again gets a fresh placeholder
        assert sh(runner, "mkdir .git", pol).status.exit_code != 0
