"""``denied`` evidence: true only for a failed write the policy caused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.executors.denial import find_denial, hint, path_candidates
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy


def ws_policy(ws: Path, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE) -> SandboxPolicy:
    return SandboxPolicy(
        mode=mode,
        workspace=ws,
        writable_roots=(ws,) if mode is SandboxMode.WORKSPACE_WRITE else (),
        protected_paths=(ws / ".git", ws / ".dsh"),
        hidden_paths=(ws / "secret",),
    )


def denial(policy: SandboxPolicy, text: str, exit_code: int | None = 1) -> str | None:
    found = find_denial(policy, exit_code=exit_code, outputs=(text,), workdir=str(policy.workspace))
    return found.path if found else None


@pytest.mark.parametrize(
    "line",
    [
        "bash: /etc/x: Permission denied",
        "bash: line 1: /etc/x: Read-only file system",
        "touch: cannot touch '/etc/x': Permission denied",
        "mkdir: cannot create directory ‘/etc/x’: Read-only file system",
        "PermissionError: [Errno 13] Permission denied: '/etc/x'",
        "OSError: [Errno 30] Read-only file system: \"/etc/x\"",
        "cp: cannot create regular file `/etc/x': Operation not permitted",
        "sh: 1: cannot create /etc/x: Read-only file system",
        "/bin/sh: 3: cannot create /etc/x: Permission denied",
    ],
)
def test_write_outside_roots_is_denied(workspace: Path, line: str) -> None:
    assert denial(ws_policy(workspace), "noise\n" + line + "\n") == "/etc/x"


def test_protected_and_relative_paths(workspace: Path) -> None:
    policy = ws_policy(workspace)
    git_config = str(workspace / ".git/config")
    assert denial(policy, "bash: .git/config: Read-only file system") == git_config
    assert denial(policy, "fatal: Unable to create '.git/index.lock': Read-only file system")
    # read-only mode: the workspace itself is not writable
    ro = ws_policy(workspace, SandboxMode.READ_ONLY)
    assert denial(ro, "bash: out.txt: Read-only file system") == str(workspace / "out.txt")


def test_hidden_path_read_is_denied(workspace: Path) -> None:
    found = find_denial(
        ws_policy(workspace), exit_code=1, outputs=("cat: secret/k: Permission denied",),
        workdir=str(workspace),
    )
    assert found is not None and found.kind == "read"
    expected = f"read of {workspace}/secret/k denied under workspace-write"
    assert hint(found, SandboxMode.WORKSPACE_WRITE) == expected


def test_never_on_exit_zero_or_signal(workspace: Path) -> None:
    policy = ws_policy(workspace)
    assert denial(policy, "bash: /etc/x: Permission denied", exit_code=0) is None
    assert denial(policy, "bash: /etc/x: Permission denied", exit_code=None) is None


def test_not_fooled(workspace: Path) -> None:
    policy = ws_policy(workspace)
    # `false`, the word sandbox, errors without the EACCES/EPERM/EROFS texts
    assert denial(policy, "") is None
    assert denial(policy, "ls: cannot access '/opt/sandbox/x': No such file or directory") is None
    assert denial(policy, "sandbox denied everything") is None
    # the error text with no path at all
    assert denial(policy, "Permission denied (publickey).") is None
    assert denial(policy, "ssh: connect to host example port 22: Operation not permitted") is None
    # a writable path: the policy did not cause it (e.g. a chmod 000 file)
    assert denial(policy, f"cat: {workspace}/f: Permission denied") is None


def test_host_refusal_is_not_the_policy(workspace: Path) -> None:
    # A path the host itself would not let us write is the command's own failure,
    # not the policy's: a 0555 directory for a normal user; as root, /proc/sys.
    ro_dir = workspace / "ro-dir"
    ro_dir.mkdir()
    ro_dir.chmod(0o555)
    try:
        candidates = (ro_dir, Path("/proc/sys/kernel"))
        target = next((d for d in candidates if d.is_dir() and not os.access(d, os.W_OK)), None)
        if target is None:
            pytest.skip("no directory here that the host refuses to let us write")
        policy = ws_policy(workspace, SandboxMode.READ_ONLY)
        assert denial(policy, f"touch: cannot touch '{target}/x': Permission denied") is None
        assert denial(policy, f"touch: cannot touch '{workspace}/x': Permission denied")
    finally:
        ro_dir.chmod(0o755)


def test_danger_full_access_never_denied(workspace: Path) -> None:
    policy = ws_policy(workspace, SandboxMode.DANGER_FULL_ACCESS)
    assert denial(policy, "bash: /etc/x: Permission denied") is None


def test_symlinked_path_is_canonicalised(workspace: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-etc"
    link.symlink_to("/etc")
    assert denial(ws_policy(workspace), f"bash: {link}/x: Permission denied") == "/etc/x"
    inside = tmp_path / "link-to-ws"
    inside.symlink_to(workspace)
    assert denial(ws_policy(workspace), f"bash: {inside}/x: Permission denied") is None


def test_candidates() -> None:
    line = "bash: line 1: /a b/c: Permission denied"
    assert path_candidates(line, line.index("Permission")) == ["/a b/c"]
