"""What real work needs from the docker runner: an exec-able /tmp, and an image
with python3-venv, a C toolchain, make and git (a Debian rootfs made by
mmdebstrap) that falls back to the host copy when it cannot be built."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from dsh.runners.docker import DockerRunner
from dsh.runners.docker.client import connect, find_image
from dsh.runners.docker.debian import PACKAGES, _host_suite, _user_lines, plan_debian
from dsh.runners.docker.image import ROOTFS_LABEL, keep_existing
from dsh.runners.docker.spec import build_spec
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import ExitStatus

from tests.runners.docker.helpers import docker_runner, policy, run
from tests.support.sandboxed import need_runner


@pytest.mark.parametrize("mode", [SandboxMode.READ_ONLY, SandboxMode.WORKSPACE_WRITE])
def test_private_tmp_is_mounted_exec(workspace: Path, mode: SandboxMode) -> None:
    spec = build_spec(policy(workspace, mode), image="i", user="1:1", pids=None, memory=None)
    tmp = spec.docker_kwargs()["tmpfs"]["/tmp"].split(",")
    assert "exec" in tmp and "noexec" not in tmp
    assert "nosuid" in tmp and "nodev" in tmp
    assert tmp[0] == ("ro" if mode is SandboxMode.READ_ONLY else "rw")


def test_a_program_written_to_tmp_runs(workspace: Path) -> None:
    script = "printf '#!/bin/sh\\necho ran-from-tmp\\n' > /tmp/t && chmod +x /tmp/t && /tmp/t"
    with docker_runner() as runner:
        result = run(runner, ["/bin/sh", "-c", script], policy(workspace))
    assert result.status == ExitStatus(0), result.stderr
    assert result.stdout == b"ran-from-tmp\n"


def test_debian_plan_is_a_minbase_with_the_workload_tools(tmp_path: Path) -> None:
    plan = plan_debian(env={"DSH_DEBIAN_MIRROR": "http://mirror.invalid/debian", "DSH_DEBIAN_SUITE": "trixie"})
    argv = plan.argv(tmp_path / "rootfs.tar")
    # Found on the fixed system PATH, so a command-planted mmdebstrap is never run.
    assert os.path.isabs(argv[0]) and os.path.basename(argv[0]) == "mmdebstrap"
    assert "--variant=minbase" in argv and "--format=tar" in argv
    assert argv[-3:] == ["trixie", str(tmp_path / "rootfs.tar"), "http://mirror.invalid/debian"]
    included = next(a for a in argv if a.startswith("--include=")).split("=", 1)[1].split(",")
    for needed in ("python3", "python3-venv", "gcc", "libc6-dev", "make", "git", "procps", "util-linux",
                   "nodejs", "npm", "sqlite3", "openssh-client"):
        assert needed in included and needed in PACKAGES
    hook = next(a for a in argv if a.startswith("--customize-hook=")).split("=", 1)[1]
    for mountpoint in ("etc/hosts", "etc/hostname", "etc/resolv.conf"):
        assert f'touch "$1/{mountpoint}"' in hook


def test_debian_users_name_the_host_uid(tmp_path: Path) -> None:
    assert _user_lines(0, 0, "root") == ((), ())
    assert _user_lines(65534, 65534, "nobody") == ((), ())
    passwd, group = _user_lines(1234, 1235, "dev")
    assert passwd == ("dev:x:1234:1235:dev:/tmp:/bin/bash",) and group == ("dev:x:1235:",)
    # The hook appends them with the line quoted for the shell, and runs as written.
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\n")
    plan = plan_debian()
    hook = type(plan)(plan.suite, plan.mirrors, plan.packages, passwd, group).customize_script()
    subprocess.run(["sh", "-c", hook, "exec", str(root)], check=True)
    assert (root / "etc/passwd").read_text().splitlines()[-1] == passwd[0]
    assert (root / "etc/group").read_text().splitlines()[-1] == group[0]
    assert (root / "etc/hosts").exists()


def test_host_suite_follows_a_debian_host(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_CODENAME=trixie\n')
    assert _host_suite(str(release)) == "trixie"
    release.write_text('ID=ubuntu\nVERSION_CODENAME=noble\n')
    assert _host_suite(str(release)) == "bookworm"
    assert _host_suite(str(tmp_path / "missing")) == "bookworm"


def test_if_missing_upgrades_only_a_host_copy_and_only_when_debian_can_be_built() -> None:
    assert keep_existing("debian", "auto", debian_possible=True)
    assert not keep_existing("host-copy", "auto", debian_possible=True)
    assert keep_existing("host-copy", "auto", debian_possible=False)
    assert keep_existing("host-copy", "host", debian_possible=True)


def _build(tag: str, *extra: str, mirror: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "image", "build", "--tag", tag, *extra],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "DSH_DEBIAN_MIRROR": mirror})


def test_debian_build_failure_is_clear_and_auto_falls_back_to_the_host_copy(workspace: Path) -> None:
    tag = "dsh-sandbox/runtime-test:fallback"
    with docker_runner():
        pass  # skips (or fails in CI) when the daemon is down
    dead_mirror = "http://127.0.0.1:9/debian"  # nothing listens: mmdebstrap fails fast, offline
    client = connect()
    try:
        strict = _build(tag, "--method", "debian", mirror=dead_mirror)
        # SANDBOX_UNAVAILABLE: the sandbox (here its image) could not be made, nothing ran.
        assert strict.returncode == 125, strict.stdout + strict.stderr
        assert "mmdebstrap" in strict.stderr and "Traceback" not in strict.stderr
        assert find_image(client, tag) is None
        auto = _build(tag, mirror=dead_mirror)
        assert auto.returncode == 0, auto.stderr
        assert "falling back to a host copy" in auto.stdout or "mmdebstrap is not installed" in auto.stdout
        image_id = find_image(client, tag)
        assert image_id is not None
        assert client.api.inspect_image(image_id)["Config"]["Labels"][ROOTFS_LABEL] == "host-copy"
        with docker_runner({"image": tag}) as runner:
            result = run(runner, ["/bin/bash", "-c", "echo fallback-ok"], policy(workspace))
        assert result.stdout == b"fallback-ok\n"
    finally:
        if find_image(client, tag) is not None:
            client.api.remove_image(tag, force=True)
        client.close()


def _repo_with_subdir(tmp_path: Path) -> tuple[Path, Path]:
    top = (tmp_path / "checkout").resolve()
    sub = top / "pkg"
    sub.mkdir(parents=True)
    git = ["git", "-C", str(top), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (sub / "f.txt").write_text("one\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (top / "top.txt").write_text("untracked\n")
    return top, sub


@pytest.mark.parametrize("mode", [SandboxMode.READ_ONLY, SandboxMode.WORKSPACE_WRITE])
def test_the_enclosing_repository_is_mounted_read_only(tmp_path: Path, mode: SandboxMode) -> None:
    top, sub = _repo_with_subdir(tmp_path)
    spec = build_spec(policy(sub, mode), image="i", user="1:1", pids=None, memory=None)
    binds = [(m.target, m.read_only) for m in spec.mounts if m.kind == "bind"]
    # The repository first (read-only), the workspace on top of it.
    assert binds == [(str(top), True), (str(sub), mode is SandboxMode.READ_ONLY)]


def test_a_home_directory_repository_is_not_mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top, sub = _repo_with_subdir(tmp_path)
    monkeypatch.setenv("HOME", str(top))
    spec = build_spec(policy(sub), image="i", user="1:1", pids=None, memory=None)
    assert [m.target for m in spec.mounts if m.kind == "bind"] == [str(sub)]


def test_git_status_works_in_a_subdirectory_workspace(tmp_path: Path) -> None:
    top, sub = _repo_with_subdir(tmp_path)
    script = ("git -c safe.directory='*' status --porcelain && git -c safe.directory='*' log --oneline | wc -l; "
              "{ echo x > ../top.txt; } 2>/dev/null || echo parent-read-only; echo y > here.txt && echo wrote")
    with docker_runner() as runner:
        result = run(runner, ["/bin/sh", "-c", script], policy(sub), cwd=str(sub))
    assert result.stdout == b"?? top.txt\n1\nparent-read-only\nwrote\n", result.stderr
    assert (top / "top.txt").read_text() == "untracked\n" and (sub / "here.txt").read_text() == "y\n"


def test_a_missing_user_image_names_docker_build() -> None:
    need_runner("docker")
    runner = DockerRunner({"image": "dsh-sandbox/h8-absent:nope"})
    try:
        probe = runner.probe()
    finally:
        runner.close()
    assert not probe.available
    assert "never pulls" in probe.reason and "docker build -t dsh-sandbox/h8-absent:nope" in probe.reason


def _busybox_only_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("bin", "etc", "tmp", "proc", "sys", "dev", "run"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add("/usr/bin/busybox", arcname="bin/busybox")
        for applet in ("sh", "sleep"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        for name in ("etc/hosts", "etc/hostname", "etc/resolv.conf"):
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    return buffer.getvalue()


def test_a_user_image_without_bash_is_refused_before_anything_runs(workspace: Path) -> None:
    need_runner("docker")
    if not os.path.exists("/usr/bin/busybox"):
        pytest.skip("SANDBOX_UNAVAILABLE: no static busybox to build a bash-less image")
    tag = f"dsh-sandbox/h8-test-nobash:{os.getpid()}"
    client = connect()
    try:
        client.api.import_image_from_data(_busybox_only_tar(), repository=tag.split(":")[0], tag=tag.split(":")[1])
        with docker_runner({"image": tag}) as runner, pytest.raises(SandboxUnavailable, match=r"lacks bash"):
            run(runner, ["/bin/sh", "-c", "echo ran > ran.txt"], policy(workspace))
        assert not (workspace / "ran.txt").exists()
    finally:
        client.images.remove(tag, force=True)
        client.close()
