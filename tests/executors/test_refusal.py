"""Denial lines claim only what the output shows: a traceback frame is not the
refused file, a quoted error text is not a path, a read is a read, and what no
wider mode allows (a socket, local IPC, the network, git on a read-only
``.git``) is said as such and never offered an escalation."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.executors.denial import find_denial, find_path_refusals, hint
from dsh.executors.refusal import describe, find_refusal, git_key_hint
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

SOCKET_TRACEBACK = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/socket.py", line 232, in __init__
    _socket.socket.__init__(self, family, type, proto, fileno)
PermissionError: [Errno 13] Permission denied
"""
LOCK_TRACEBACK = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/multiprocessing/context.py", line 68, in Lock
    return Lock(ctx=self.get_context())
  File "/usr/lib/python3.11/multiprocessing/synchronize.py", line 162, in __init__
    SemLock.__init__(self, SEMAPHORE, 1, 1, ctx=ctx)
  File "/usr/lib/python3.11/multiprocessing/synchronize.py", line 57, in __init__
    sl = self._semlock = _multiprocessing.SemLock(
PermissionError: [Errno 13] Permission denied
"""
PIP_OFFLINE = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection "
    "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to "
    "establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/flit-core/\n"
    "ERROR: Could not find a version that satisfies the requirement flit_core\n"
)


def policy(ws: Path, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE, **kw: object) -> SandboxPolicy:
    return SandboxPolicy(
        mode=mode,
        workspace=ws,
        writable_roots=(ws,) if mode is SandboxMode.WORKSPACE_WRITE else (),
        protected_paths=(ws / ".git", ws / ".dsh"),
        hidden_paths=(ws / "secret",),
        profile="python",
        **kw,  # type: ignore[arg-type]
    )


def refusal_line(p: SandboxPolicy, text: str, *, limitations: dict[str, str] | None = None,
                 runner: str = "bwrap", command: str = "") -> str | None:
    found = find_refusal(p, exit_code=1, outputs=(text,), workdir=str(p.workspace), command=command)
    return describe(found, p, runner=runner, limitations=limitations or {}) if found else None


@pytest.mark.parametrize("text", [SOCKET_TRACEBACK, LOCK_TRACEBACK])
def test_a_traceback_frame_is_never_the_refused_file(workspace: Path, text: str) -> None:
    for mode in (SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY):
        p = policy(workspace, mode)
        assert find_denial(p, exit_code=1, outputs=(text,), workdir=str(workspace)) is None
        assert find_path_refusals(p, exit_code=1, outputs=(text,), workdir=str(workspace)) == []


def test_a_quoted_error_text_is_not_a_path(workspace: Path) -> None:
    ro = policy(workspace, SandboxMode.READ_ONLY)
    for text in ('error: "Permission denied"', "fatal: 'Operation not permitted'", "x: `Read-only file system`"):
        assert find_path_refusals(ro, exit_code=1, outputs=(text,), workdir=str(workspace)) == [], text


def test_a_refused_read_is_named_a_read_and_never_escalates(workspace: Path) -> None:
    p = policy(workspace)
    found = find_path_refusals(p, exit_code=1, outputs=("cat: /proc/1/environ: Permission denied",),
                               workdir=str(workspace))
    assert [(d.kind, d.path, d.escalates) for d in found] == [("read", "/proc/1/environ", False)]
    assert hint(found[0], p.mode) == "read of /proc/1/environ denied under workspace-write"
    assert find_denial(p, exit_code=1, outputs=("cat: /proc/1/environ: Permission denied",),
                       workdir=str(workspace)) is None
    python = "PermissionError: [Errno 13] Permission denied: '/proc/1/environ'"
    found = find_path_refusals(p, exit_code=1, outputs=(python,), workdir=str(workspace))
    assert [(d.kind, d.escalates) for d in found] == [("access", False)]
    assert refusal_line(p, python) == "access to /proc/1/environ denied under workspace-write"
    # a write to the same tree is still a write
    written = "bash: line 1: /proc/1/environ: Read-only file system"
    assert find_denial(p, exit_code=1, outputs=(written,), workdir=str(workspace)) is not None


def test_a_hidden_path_read_still_escalates(workspace: Path) -> None:
    found = find_denial(policy(workspace), exit_code=1, outputs=("cat: secret/k: Permission denied",),
                        workdir=str(workspace))
    assert found is not None and (found.kind, found.escalates) == ("read", True)


def test_a_refused_unix_socket_names_the_runners_limitation(workspace: Path) -> None:
    p = policy(workspace)
    line = refusal_line(p, SOCKET_TRACEBACK, limitations={"unix-sockets": "..."})
    assert line == ("a unix socket was refused, not a file: the bwrap runner refuses it (limitation unix-sockets; "
                    "`dsh-sandbox profile explain python --runner bwrap` says why)")
    # landlock refuses every socket() family under network-off: both are said
    line = refusal_line(p, SOCKET_TRACEBACK, limitations={"local-ipc": "..."}, runner="landlock")
    assert line is not None and line.startswith("a socket was refused, not a file: the landlock runner refuses it "
                                                "(limitation local-ipc;")
    assert line.endswith("; the network is off under profile python (--network allows it)")
    # a runner that declares no such limitation: nothing is claimed
    assert refusal_line(policy(workspace, network=True), SOCKET_TRACEBACK) is None


def test_refused_local_ipc_names_the_limitation(workspace: Path) -> None:
    line = refusal_line(policy(workspace), LOCK_TRACEBACK, limitations={"local-ipc": "..."}, runner="landlock")
    assert line is not None and line.startswith("local IPC (a semaphore or /dev/shm) was refused, not a file: "
                                                "the landlock runner refuses it (limitation local-ipc;")
    assert refusal_line(policy(workspace), LOCK_TRACEBACK, limitations={"unix-sockets": "..."}) is None


@pytest.mark.parametrize("text", [
    PIP_OFFLINE,
    "curl: (6) Could not resolve host: example.com",
    "bash: connect: Network is unreachable\nbash: line 1: /dev/tcp/10.0.0.1/80: Network is unreachable",
    "bash: socket: Permission denied\nbash: line 1: /dev/tcp/127.0.0.1/9: Permission denied",
    "npm ERR! request to https://registry/x failed, reason: getaddrinfo EAI_AGAIN registry",
    "fatal: unable to access 'https://example.com/r.git/': Could not resolve host: example.com",
    # a refused connection: the command's own loopback has no proxy or service of the host's
    "ConnectionRefusedError: [Errno 111] Connection refused",
    "curl: (7) Failed to connect to 127.0.0.1 port 3128 after 0 ms: Couldn't connect to server",
    "connect ECONNREFUSED 127.0.0.1:3128",
    "fatal: unable to access 'https://example.com/r.git/': Failed to connect to 127.0.0.1 port 3128: "
    "Connection refused",
])
def test_network_off_is_said_once_with_the_way_to_allow_it(workspace: Path, text: str) -> None:
    expected = ("the network is off under profile python: a name lookup or connection failed; "
                "allow it with --network (or network = true in the profile)")
    assert refusal_line(policy(workspace), text) == expected
    assert refusal_line(policy(workspace, network=True), text) is None
    assert find_denial(policy(workspace), exit_code=1, outputs=(text,), workdir=str(workspace)) is None


def test_git_on_a_read_only_git_dir(workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git/HEAD").write_text("ref: refs/heads/main\n")
    p = policy(workspace)
    expected = ('git failed and .git is read-only under this profile (git = "read-only"): git = "commit" in the '
                "profile allows commit, add and stash (hooks and config stay read-only)")
    assert refusal_line(p, "", command="git stash") == expected  # git stash says nothing at all
    assert refusal_line(p, "", command="cd sub && git add -A") == expected
    assert refusal_line(p, "", command="make") is None
    assert refusal_line(policy(workspace, git="commit"), "", command="git stash") is None
    # a denied write into the git dir names the key that would allow it, but not for config or hooks
    assert git_key_hint(p, str(workspace / ".git/index.lock")).endswith('git = "commit" in the profile allows commits')
    assert git_key_hint(p, str(workspace / ".git/config")) == ""
    assert git_key_hint(p, str(workspace / ".git/hooks/pre-commit")) == ""


def test_git_names_a_relative_config_path(workspace: Path) -> None:
    (workspace / ".git").mkdir()
    line = "error: could not lock config file .git/config: Read-only file system"
    found = find_denial(policy(workspace), exit_code=255, outputs=(line,), workdir=str(workspace))
    assert found is not None and found.path == str(workspace / ".git/config")
    # a bare word is still never a path
    assert find_denial(policy(workspace), exit_code=1, outputs=("error: could not lock thing: Permission denied",),
                       workdir=str(workspace)) is None


def test_nothing_on_success_or_unconstrained(workspace: Path) -> None:
    p = policy(workspace)
    assert find_refusal(p, exit_code=0, outputs=(PIP_OFFLINE,), workdir=str(workspace)) is None
    full = policy(workspace, SandboxMode.DANGER_FULL_ACCESS)
    assert find_refusal(full, exit_code=1, outputs=(PIP_OFFLINE,), workdir=str(workspace)) is None


@pytest.mark.parametrize("text", ["ls: cannot access '.': Invalid argument\n",
                                  "stat: cannot statx '/etc/hostname': Invalid argument\n"])
def test_stat_failing_with_invalid_argument_names_the_runners_limitation(workspace: Path, text: str) -> None:
    """A runner whose kernel refuses a flag glibc passes to ``statx`` (an old
    runsc): no file was refused, the call was; the line says so when the
    runner declares the limitation, and claims nothing when it does not."""
    p = policy(workspace)
    why = "this runsc refuses AT_NO_AUTOMOUNT in statx"
    line = refusal_line(p, text, limitations={"file-status": why}, runner="gvisor")
    assert line is not None and "limitation file-status" in line and why in line, line
    assert "denied" not in line and "--mode" not in line
    assert refusal_line(p, text, runner="bwrap") is None
    assert refusal_line(p, "ls: cannot access 'x': No such file or directory\n",
                        limitations={"file-status": why}) is None
