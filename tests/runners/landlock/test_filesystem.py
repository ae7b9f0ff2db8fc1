"""Filesystem attacks through the real kernel Landlock, in both restricted modes.

Each test checks the host afterwards: the file outside is unchanged or absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import RO, WW, make_policy, py, sh

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]


@pytest.mark.parametrize("mode", MODES)
def test_write_outside_roots_is_denied(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    result = sh(runner, make_policy(mode, ws), f"echo pwned > '{outside}/new.txt'; echo x >> '{outside}/secret.txt'")
    assert result.returncode != 0
    assert "Permission denied" in result.err
    assert not (outside / "new.txt").exists()
    assert (outside / "secret.txt").read_text() == "original\n"


@pytest.mark.parametrize("mode", MODES)
def test_write_inside_workspace_follows_the_mode(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, _ = layout
    result = sh(runner, make_policy(mode, ws), "echo written > new.txt && mkdir d && echo more > d/x && rm file.txt")
    if mode is WW:
        assert result.returncode == 0, result.err
        assert (ws / "new.txt").read_text() == "written\n"
        assert (ws / "d" / "x").read_text() == "more\n"
        assert not (ws / "file.txt").exists()
    else:
        assert result.returncode != 0
        assert not (ws / "new.txt").exists()
        assert (ws / "file.txt").exists()


@pytest.mark.parametrize("mode", MODES)
def test_dev_null_is_writable_and_dev_shm_is_not(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, _ = layout
    name = f"dsh-landlock-test-{os.getpid()}-{mode.value}"
    result = sh(runner, make_policy(mode, ws), f"echo ok > /dev/null && echo ok >&2; echo x > /dev/shm/{name}")
    assert result.err.startswith("ok\n")
    assert "Permission denied" in result.err
    assert not Path("/dev/shm", name).exists()


@pytest.mark.parametrize("mode", MODES)
def test_dotdot_and_proc_self_traversal_are_denied(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    targets = [
        f"{ws}/../outside/a.txt",
        f"/proc/self/root{outside}/b.txt",
        "/proc/self/cwd/c.txt",  # cwd is the outside directory
        "/proc/self/cwd/../outside/d.txt",
    ]
    script = "; ".join(f"echo pwned > '{t}'" for t in targets)
    result = sh(runner, make_policy(mode, ws), script, cwd=outside)
    assert result.err.count("Permission denied") == len(targets), result.err
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_proc_self_cwd_inside_the_workspace_is_writable(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout  # the same path forms work where the mode allows: Landlock judges the real file
    result = sh(runner, make_policy(WW, ws), "echo ok > /proc/self/cwd/via-proc.txt", cwd=ws)
    assert result.returncode == 0, result.err
    assert (ws / "via-proc.txt").read_text() == "ok\n"


@pytest.mark.parametrize("mode", MODES)
def test_symlink_in_workspace_pointing_outside(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    (ws / "link-dir").symlink_to(outside)
    (ws / "link-file").symlink_to(outside / "secret.txt")
    script = (
        "echo pwned > link-dir/new.txt; echo pwned > link-file; "
        f"ln -s '{outside}' made-inside && echo pwned > made-inside/new2.txt"
    )
    result = sh(runner, make_policy(mode, ws), script)
    assert result.returncode != 0
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "original\n"
    # Reading through the link is fine: reads are allowed everywhere.
    assert sh(runner, make_policy(mode, ws), "cat link-file").out == "original\n"


@pytest.mark.parametrize("mode", MODES)
def test_hardlink_of_outside_file_into_workspace_is_denied(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode
) -> None:
    ws, outside = layout
    result = sh(runner, make_policy(mode, ws), f"ln '{outside}/secret.txt' hl && echo pwned > hl")
    assert result.returncode != 0
    assert not (ws / "hl").exists()
    assert (outside / "secret.txt").read_text() == "original\n"
    assert os.stat(outside / "secret.txt").st_nlink == 1


@pytest.mark.parametrize("mode", MODES)
def test_rename_tricks_are_denied(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    ws, outside = layout
    script = (
        f"mv '{outside}/secret.txt' ./stolen.txt; "  # pull a file in
        f"mv ./file.txt '{outside}/pushed.txt'; "  # push a file out
        f"mv '{ws}' '{ws}-moved'; "  # move the workspace itself
        f"mv '{outside}' '{ws}/outside-moved'"  # move the outside dir into the workspace
    )
    result = sh(runner, make_policy(mode, ws), script)
    assert result.returncode != 0
    assert (outside / "secret.txt").read_text() == "original\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (ws / "file.txt").exists() and not (ws / "stolen.txt").exists()
    assert not Path(f"{ws}-moved").exists()


def test_rename_inside_the_workspace_works(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    result = sh(runner, make_policy(WW, ws), "mkdir a b && mv file.txt a/ && mv a/file.txt b/renamed.txt")
    assert result.returncode == 0, result.err
    assert (ws / "b" / "renamed.txt").read_text() == "in workspace\n"


@pytest.mark.parametrize("mode", MODES)
def test_truncate_mkfifo_and_chmod_outside_are_denied(
    runner: LandlockRunner, layout: Layout, mode: SandboxMode
) -> None:
    ws, outside = layout
    code = (
        "import os, sys\n"
        "out = sys.argv[1]\n"
        "denied = 0\n"
        "for op in (lambda: os.truncate(out + '/secret.txt', 0),\n"
        "           lambda: os.mkfifo(out + '/fifo'),\n"
        "           lambda: os.symlink('/etc', out + '/sym'),\n"
        "           lambda: os.mkdir(out + '/dir')):\n"
        "    try:\n"
        "        op()\n"
        "    except PermissionError:\n"
        "        denied += 1\n"
        "print(denied)\n"
    )
    result = py(runner, make_policy(mode, ws), code, str(outside))
    assert result.out.strip() == "4", result.err
    assert (outside / "secret.txt").read_text() == "original\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_extra_writable_root_is_writable(runner: LandlockRunner, layout: Layout, tmp_path: Path) -> None:
    ws, outside = layout
    cache = tmp_path / "cache"
    cache.mkdir()
    result = sh(runner, make_policy(WW, ws, extra_roots=(cache,)), f"echo c > '{cache}/c' && echo o > '{outside}/o'")
    assert (cache / "c").read_text() == "c\n"
    assert not (outside / "o").exists()
    assert result.returncode != 0
