"""``denied`` evidence: true only for a failed write (or hidden read) the policy
caused, in every common error style, naming the path that was refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.denial import find_denial, hint, path_candidates
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

from tests.support.sandboxed import need_runner, sandbox_ctx


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
            pytest.skip("SANDBOX_UNAVAILABLE: no directory here that the host refuses to let us write")
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


# -- every common error style, naming the right path --------------------------------
@pytest.mark.parametrize(
    "text",
    [
        # Python
        "PermissionError: [Errno 13] Permission denied: '/etc/x'",
        "OSError: [Errno 30] Read-only file system: '/etc/x'",
        # Node (upper-case codes, lower-case text)
        "Error: EACCES: permission denied, open '/etc/x'",
        "Error: EROFS: read-only file system, open '/etc/x'",
        "Error: EPERM: operation not permitted, mkdir '/etc/x'",
        # Go (captured: no Go toolchain here)
        "open /etc/x: permission denied",
        "mkdir /etc/x: read-only file system",
        # Rust: the path is in the context above the io::Error
        "Error: failed to create file `/etc/x`\n\nCaused by:\n    Permission denied (os error 13)",
        "error: failed to create directory `/etc/x`\n\nCaused by:\n  Read-only file system (os error 30)",
        # coreutils and bash
        "touch: cannot touch '/etc/x': Permission denied",
        "bash: /etc/x: Permission denied",
    ],
)
def test_error_styles(workspace: Path, text: str) -> None:
    assert denial(ws_policy(workspace), text + "\n") == "/etc/x"


def test_the_write_target_is_blamed_not_its_source(workspace: Path) -> None:
    policy = ws_policy(workspace)
    target = f"{workspace}/.git/description"
    git = f"fatal: cannot copy '/usr/share/git-core/templates/description' to '{target}': Read-only file system"
    assert denial(policy, git) == target
    python = f"OSError: [Errno 30] Read-only file system: '/etc/a' -> '{workspace}/.git/b'"
    assert denial(policy, python) == f"{workspace}/.git/b"
    assert denial(policy, f"rename /etc/a {workspace}/.git/b: permission denied") == f"{workspace}/.git/b"
    # a hidden source is what failed (reading it), whatever the target
    found = find_denial(policy, exit_code=1, outputs=("cp: cannot copy 'secret/k' to '/etc/k': Permission denied",),
                        workdir=str(workspace))
    assert found is not None and (found.path, found.kind) == (f"{workspace}/secret/k", "read")


def test_a_refused_socket_is_not_a_file_write(workspace: Path) -> None:
    ro = ws_policy(workspace, SandboxMode.READ_ONLY)
    assert denial(ro, "bash: line 1: socket: Permission denied") is None
    assert denial(ro, "bash: line 1: /dev/tcp/127.0.0.1/80: Permission denied") is None
    assert denial(ro, "PermissionError: [Errno 1] Operation not permitted") is None
    # the word in front of Node's code is not a file either (the quoted path is writable)
    assert denial(ws_policy(workspace), f"Error: EACCES: permission denied, open '{workspace}/f'") is None


def test_a_command_that_could_not_be_executed_wrote_nothing(workspace: Path) -> None:
    ro = ws_policy(workspace, SandboxMode.READ_ONLY)
    line = "bash: line 1: ./tool.sh: Permission denied"
    assert denial(ro, line, exit_code=1) == f"{workspace}/tool.sh"  # a redirect into it
    assert denial(ro, line, exit_code=126) is None  # exec of a non-executable file
    assert denial(ro, "sh: 1: exec: ./tool: Permission denied", exit_code=127) is None
    found = find_denial(ro, exit_code=126, outputs=("bash: secret/tool: Permission denied",),
                        workdir=str(workspace))
    assert found is not None and found.kind == "read"


# -- real programs under the real runners ---------------------------------------------
def _blamed(ctx: Any, command: str) -> str | None:
    """Run ``command``; the path the denial evidence names (None: no denial)."""
    shell = ctx.require(ShellExecutor)
    spec = shell.resolve(ShellExecRequest(command=command, timeout_ms=60_000))
    result = shell.execute(spec).result()
    found = find_denial(spec.sandbox_policy, exit_code=result.exit_code,
                        outputs=(result.stderr.text, result.stdout.text), workdir=spec.workdir)
    assert result.sandbox is not None and result.sandbox.denied == (found is not None)
    return found.path if found else None


WRITERS = {
    "python": "python3 -c \"open('out.txt', 'w')\"",
    "node": "node -e \"require('fs').writeFileSync('out.txt', 'x')\"",
    "coreutils": "touch out.txt",
    "bash": "echo x > out.txt",
    "cargo": "cargo new --vcs none --name out out.txt",  # the path is on a line above the io::Error
}


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_real_programs_name_the_refused_path(workspace: Path, runner: str) -> None:
    need_runner(runner)
    missing = [w for w in ("node", "cargo") if shutil.which(w) is None]
    with sandbox_ctx(workspace, runner=runner, mode="read-only") as ctx:
        for name, command in WRITERS.items():
            if name not in missing:
                assert _blamed(ctx, command) == str(workspace / "out.txt"), name
        # a refused socket() is the network, not a write to ./socket
        assert _blamed(ctx, "exec 3<>/dev/tcp/127.0.0.1/9") is None
    if missing:
        pytest.skip(f"SANDBOX_UNAVAILABLE: {', '.join(missing)} not installed; the other writers passed")


def test_git_init_blames_the_repository_not_its_template(workspace: Path, trusted_dir: Path) -> None:
    need_runner("bwrap")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / ".git" / "description").unlink()
    # The whole git dir read-only (the built-in profile lets git commit).
    strict = trusted_dir / "git-read-only.toml"
    strict.write_text('extends = "workspace-write"\ngit = "read-only"\n')
    with sandbox_ctx(workspace, runner="bwrap", mode="workspace-write", profile=str(strict)) as ctx:
        assert _blamed(ctx, "git init") == str(workspace / ".git" / "description")
