"""The one ``dsh-sandbox:`` line a failed command gets, through the real CLI on
every local runner, and what ``tool call`` shows the model: a refused socket,
local IPC, a read and the network are said as such (never ``write to
.../socket.py``, never ``[sandbox: file access denied ...]``, which invites an
escalation); git on a read-only ``.git`` names the profile key."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.cli import cli, runner_flags, trusted_config_dir
from tests.support.sandboxed import need_runner

RUNNERS = ("landlock", "bwrap", "docker")
#: The events every runner says the same way, gVisor included.
EVERY_RUNNER = (*RUNNERS, "gvisor")
UNIX_SOCKET = "import socket; socket.socket(socket.AF_UNIX)"
LOCK = "import multiprocessing; multiprocessing.Lock()"
FETCH = "import urllib.request; urllib.request.urlopen('http://example.com', timeout=20)"
CONNECT = "import socket; socket.create_connection(('127.0.0.1', 3128), timeout=20)"
NETWORK_OFF = (
    "the network is off under profile {profile}: a name lookup or connection failed; "
    "allow it with --network (or network = true in the profile)"
)


def notes(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("dsh-sandbox:")]


def run(runner: str, workspace: Path, *argv: str, flags: Sequence[str] = ()) -> subprocess.CompletedProcess[bytes]:
    need_runner(runner)
    return cli("run", *runner_flags(runner), *flags, "--", *argv, cwd=workspace)


def tool(runner: str, workspace: Path, command: str, flags: Sequence[str] = ()) -> str:
    need_runner(runner)
    args = json.dumps({"command": command, "description": "try it"})
    return cli("tool", "call", "bash", args, *runner_flags(runner), *flags, cwd=workspace).stdout.decode()


def profile_of(runner: str) -> str:
    return "landlock-ok" if runner == "landlock" else "workspace-write"


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_refused_unix_socket_is_not_a_write_to_socket_py(runner: str, workspace: Path) -> None:
    done = run(runner, workspace, "python3", "-c", UNIX_SOCKET)
    assert done.returncode == 1, done.stderr
    if runner == "landlock":
        expected = [
            "dsh-sandbox: a socket was refused, not a file: the landlock runner refuses it (limitation local-ipc; "
            "`dsh-sandbox profile explain PROFILE --runner landlock` says why); the network is off under profile "
            "landlock-ok (--network allows it)"
        ]
    else:
        expected = [
            f"dsh-sandbox: a unix socket was refused, not a file: the {runner} runner refuses it (limitation "
            f"unix-sockets; `dsh-sandbox profile explain workspace-write --runner {runner}` says why)"
        ]
    assert notes(done.stderr) == expected
    shown = tool(runner, workspace, f'python3 -c "{UNIX_SOCKET}"')
    assert "[sandbox: file access denied" not in shown and "socket.py" not in shown.splitlines()[-1]
    assert shown.splitlines()[-1] == "[sandbox: " + expected[0].removeprefix("dsh-sandbox: ") + "]"


def test_refused_local_ipc_names_landlocks_limitation(workspace: Path) -> None:
    done = run("landlock", workspace, "python3", "-c", LOCK)
    assert done.returncode == 1, done.stderr
    assert notes(done.stderr) == [
        "dsh-sandbox: local IPC (a semaphore or /dev/shm) was refused, not a file: the landlock runner refuses it "
        "(limitation local-ipc; `dsh-sandbox profile explain PROFILE --runner landlock` says why)"
    ]
    assert "[sandbox: file access denied" not in tool("landlock", workspace, f'python3 -c "{LOCK}"')


def test_a_refused_read_of_another_process_is_a_read(workspace: Path) -> None:
    # Landlock refuses another domain's /proc/PID/environ (bwrap and docker have their own pid 1).
    done = run("landlock", workspace, "cat", "/proc/1/environ")
    assert done.returncode == 1, done.stderr
    assert notes(done.stderr) == ["dsh-sandbox: read of /proc/1/environ denied under workspace-write"]
    shown = tool("landlock", workspace, "cat /proc/1/environ")
    marker = "[sandbox: read of /proc/1/environ denied under workspace-write]"
    assert shown.splitlines()[-2:] == ["[exit code: 1]", marker]


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_error_text_itself_is_not_a_path(runner: str, workspace: Path) -> None:
    script = 'echo \'error: "Permission denied"\' >&2; exit 1'
    done = run(runner, workspace, "sh", "-c", script, flags=("--mode", "read-only"))
    assert done.returncode == 1 and notes(done.stderr) == [], done.stderr


@pytest.mark.parametrize("runner", EVERY_RUNNER)
def test_network_off_is_said_once(runner: str, workspace: Path) -> None:
    done = run(runner, workspace, "python3", "-c", FETCH)
    assert done.returncode == 1, done.stderr
    assert notes(done.stderr) == ["dsh-sandbox: " + NETWORK_OFF.format(profile=profile_of(runner))]
    shown = tool(runner, workspace, f'python3 -c "{FETCH}"')
    assert shown.splitlines()[-1] == "[sandbox: " + NETWORK_OFF.format(profile=profile_of(runner)) + "]"


@pytest.mark.parametrize("runner", EVERY_RUNNER)
def test_a_refused_connection_under_network_off_is_said_once(runner: str, workspace: Path) -> None:
    # A proxy on the host's loopback (the usual way out behind a corporate
    # proxy) is out of reach with the network off: the connection is refused.
    done = run(runner, workspace, "python3", "-c", CONNECT)
    assert done.returncode == 1, done.stderr
    assert notes(done.stderr) == ["dsh-sandbox: " + NETWORK_OFF.format(profile=profile_of(runner))]


@pytest.fixture
def repo(workspace: Path) -> Path:
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(workspace)], check=True)
    (workspace / "f").write_text("a\n")
    subprocess.run([*git, "-C", str(workspace), "add", "f"], check=True)
    subprocess.run([*git, "-C", str(workspace), "commit", "-qm", "f"], check=True)
    (workspace / "f").write_text("b\n")
    return workspace


GIT_KEY = 'git = "commit" in the profile allows commits'


@pytest.mark.parametrize("runner", ["bwrap", "docker", "gvisor"])
def test_git_on_a_read_only_git_dir_names_the_key(runner: str, repo: Path) -> None:
    # The default profile commits (git = "commit"); the strict case is asked for.
    strict = trusted_config_dir() / "git-read-only.toml"
    strict.write_text('extends = "workspace-write"\ngit = "read-only"\n')
    flags = ("--profile", str(strict))
    stash = run(runner, repo, "git", "stash", flags=flags)  # git itself prints nothing at all
    assert stash.returncode != 0
    assert notes(stash.stderr) == [
        'dsh-sandbox: git failed and .git is read-only under this profile (git = "read-only"): git = "commit" in '
        "the profile allows commit, add and stash (hooks and config stay read-only)"
    ]
    add = run(runner, repo, "git", "add", "f", flags=flags)
    assert notes(add.stderr) == [
        f"dsh-sandbox: write to {repo}/.git/index.lock denied under workspace-write ({repo}/.git is read-only under "
        f"this profile; {GIT_KEY})"
    ]
    config = run(runner, repo, "git", "config", "a.b", "c", flags=flags)  # relative path in git's message
    assert notes(config.stderr) == [f"dsh-sandbox: write to {repo}/.git/config denied under workspace-write"]
    assert "[sandbox: file access denied under workspace-write mode]" in tool(runner, repo, "git config a.b c",
                                                                              flags=flags)
    # Under the default profile a commit's writes are allowed, and config stays read-only.
    assert run(runner, repo, "git", "add", "f").returncode == 0
    config = run(runner, repo, "git", "config", "a.b", "c")
    assert notes(config.stderr) == [f"dsh-sandbox: write to {repo}/.git/config denied under workspace-write"]


HOG = "b = bytearray(512 << 20); b[::4096] = b'x' * len(b[::4096])"


@pytest.mark.parametrize("runner", EVERY_RUNNER)
def test_a_memory_limit_kill_names_the_limit(runner: str, workspace: Path) -> None:
    # It was a silent exit 137.
    need_runner(runner)
    accept = ('\naccept_degraded = ["landlock-protected-paths", "landlock-metadata", "landlock-process-list"]'
              if runner == "landlock" else "")
    profile = trusted_config_dir() / f"memory-{runner}.toml"
    profile.write_text(f'extends = "workspace-write"{accept}\n[limits]\nmax_memory = "128MiB"\n')
    done = cli("run", "--runner", runner, "--profile", str(profile), "--", "python3", "-c", HOG, cwd=workspace)
    assert done.returncode in (1, 137), done.stderr
    how = "was killed (SIGKILL)" if done.returncode == 137 else "could not allocate memory"  # RLIMIT_AS: MemoryError
    assert notes(done.stderr) == [
        f"dsh-sandbox: the command {how} under the memory limit of 128 MiB (max_memory in the profile): "
        "reaching it ends the command this way; raise max_memory if the work needs more"
    ]
