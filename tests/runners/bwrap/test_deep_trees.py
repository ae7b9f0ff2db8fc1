"""Workspaces that make bwrap's plan huge, through the real CLI and real bwrap:
a repository 1500 directories deep (every directory above its ``.git`` needs a
mount) is a clean refusal in seconds, naming the depth; hundreds of
repositories under long names (megabytes of mount arguments, past what
``execve`` takes) run, their ``.git`` kept read-only."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.require import require_runner


@pytest.fixture
def base(trusted_dir: Path) -> Iterator[Path]:
    # Outside /tmp (a writable root of every run).
    yield trusted_dir
    # rm, not shutil.rmtree: Python's recursion stops 1000 levels down.
    subprocess.run(["rm", "-rf", "--one-file-system", str(trusted_dir)], check=False, timeout=120)


def _chain(top: Path, names: list[str]) -> Path:
    """``top/names[0]/names[1]/...`` made one level at a time from the fd of
    the level above (no path limit on the way), with a repository at the bottom."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in [*names, ".git"]:
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        for name in ("objects", "refs", "hooks"):
            os.mkdir(name, dir_fd=fd)
        with open(os.open("HEAD", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as head:
            head.write("ref: refs/heads/main\n")
    finally:
        os.close(fd)
    return top.joinpath(*names)


def test_a_repository_1500_directories_deep_is_refused_in_seconds(base: Path) -> None:
    require_runner("bwrap")
    ws = base / "ws"
    _chain(ws, ["a"] * 1500)
    started = time.monotonic()
    done = cli("run", "--runner", "bwrap", "--", "true", cwd=ws, env={**os.environ, "HOME": str(base)})
    took = time.monotonic() - started
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 125, err
    assert "Traceback" not in err and "Argument list too long" not in err
    assert "SANDBOX_UNAVAILABLE" in err and "directories deep" in err and "--runner landlock" in err
    assert took < 60, f"{took:.0f} s"


def test_a_repository_below_the_limit_runs_with_every_level_pinned(base: Path) -> None:
    require_runner("bwrap")
    ws = base / "ws"
    deep = _chain(ws, ["a"] * 150)
    hook = deep / ".git" / "hooks" / "pre-commit"
    # Renaming the top directory would move the repository's mount away with it.
    script = f'echo pwned > "{hook}" || echo refused; mv "{ws}/a" "{ws}/b" 2>/dev/null || echo pinned'
    done = cli("run", "--runner", "bwrap", "--", "sh", "-c", script, cwd=ws, env={**os.environ, "HOME": str(base)})
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    assert done.stdout.decode().split() == ["refused", "pinned"], err
    assert not hook.exists() and (ws / "a").is_dir()


def test_the_mounts_travel_by_fd_not_by_argv(base: Path) -> None:
    require_runner("bwrap")
    from dsh.runners.bwrap.runner import BwrapRunner
    from dsh.sandbox.context import Context
    from dsh.sandbox.policy_service import PolicyConfig, PolicyService
    from dsh.sandbox.runner import LocalLaunch

    ws = base / "ws"
    deep = _chain(ws, ["a" * 200] * 15)  # 3 kB paths, 15 pins: the argv would hold them all
    ctx = Context()
    service = PolicyService(ctx, PolicyConfig(workspace=str(ws)))
    ctx.provide(service)
    policy = service.resolve()
    assert any(p.is_relative_to(deep) for p in policy.protected_paths)
    launch = BwrapRunner().prepare(("true",), policy, cwd=str(ws), env={})
    try:
        assert isinstance(launch, LocalLaunch)
        assert not any(str(deep) in str(a) for a in launch.argv)
        assert sum(len(os.fsencode(str(a))) for a in launch.argv) < 4096 + len(str(ws))
    finally:
        launch.cleanup()
        ctx.close()


def test_every_kept_path_is_held_to_both_limits_not_only_the_deepest() -> None:
    # A shallow path of PATH_MAX bytes beside a deeper, shorter one: the
    # refusal must name the long one, not let bwrap fail on its mount.
    from dsh.runners.bwrap.mounts import translate
    from dsh.sandbox.errors import SandboxUnavailable
    from dsh.sandbox.mount_plan import MountEntry, MountPlan

    deep = "/w" + "/d" * 120
    long = "/w/" + "/".join(["n" * 250] * 17)
    assert len(long) >= 4096 and deep.count("/") > long.count("/")
    ok = MountPlan((MountEntry("writable", "/w", "workspace"), MountEntry("read-only", deep, "protected")))
    assert [m.path for m in translate(ok).mounts] == ["/w", deep]
    for entries in ([deep, long], [long, deep]):
        plan = MountPlan((MountEntry("writable", "/w", "workspace"),
                          *(MountEntry("read-only", p, "protected") for p in entries)))
        with pytest.raises(SandboxUnavailable, match="directories deep") as refused:
            translate(plan)
        assert "4" in str(refused.value) and "bytes" in str(refused.value)
        assert "nnnn...nnnn" in str(refused.value)
