"""A root caller: the command keeps no capability, and ordinary root work still runs.

Checked from the host: the sandboxed process's ``/proc/<pid>/status`` and the
ownership of files after the run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import RO, WW, finish, make_policy, sh, start

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="SANDBOX_UNAVAILABLE: the caller is not root")
NOBODY = 65534


def _capabilities(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return {k: int(v, 16) for k, v in (line.split(":") for line in status) if k.startswith("Cap")}


@pytest.mark.parametrize("mode", MODES)
def test_root_command_keeps_no_capability(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    proc, launch = start(runner, make_policy(mode, layout[0]), ["sleep", "60"])
    try:
        caps = _capabilities(proc.pid)
    finally:
        proc.kill()
        finish(proc, launch)
    assert caps == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}
    assert _capabilities(os.getpid())["CapEff"] != 0  # the host keeps its own


def test_root_exec_regains_nothing(runner: LandlockRunner, layout: Layout) -> None:
    # securebits NOROOT: an exec as uid 0 (here: bash, then grep) gets no capability back.
    result = sh(runner, make_policy(RO, layout[0]), "exec grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status")
    assert [int(v, 16) for v in result.out.split()[1::2]] == [0, 0, 0], result.out + result.err


def test_root_cannot_chown_host_files_in_workspace_write(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    victim = outside / "victim"
    victim.write_text("root's\n")
    own = ws / "own"
    own.write_text("x\n")
    result = sh(runner, make_policy(WW, ws), f"chown {NOBODY} '{victim}'; echo out=$?; chown {NOBODY} own; echo in=$?")
    assert "out=1" in result.out and "in=1" in result.out, result.out + result.err  # no CAP_CHOWN anywhere
    assert victim.stat().st_uid == 0 and own.stat().st_uid == 0


def test_root_cannot_chmod_or_chown_host_files_in_read_only(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    victim = outside / "victim"
    victim.write_text("root's\n")
    victim.chmod(0o644)
    result = sh(runner, make_policy(RO, ws), f"chmod 4777 '{victim}'; chown {NOBODY} '{victim}'; exit 0")
    info = victim.stat()
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == 0, result.err


def test_ordinary_root_work_in_the_workspace_still_runs(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    script = (
        "set -e; mkdir -p a/b; echo hi > a/b/f; cp -p a/b/f g; mv g h; chmod 600 h; ln -s h l; "
        "rm -r a; touch -d 2001-01-01 h; cat l; python3 -c 'open(\"p\", \"w\").write(\"py\")'"
    )
    result = sh(runner, make_policy(WW, ws), script)
    assert result.returncode == 0 and result.out == "hi\n", result.err
    assert (ws / "p").read_text() == "py" and stat.S_IMODE((ws / "h").stat().st_mode) == 0o600


def test_workspace_files_of_another_uid_follow_their_mode_bits(runner: LandlockRunner, layout: Layout) -> None:
    # What root loses with DAC_OVERRIDE: a file another uid owns is writable only if its mode says so.
    ws, _ = layout
    for name, mode in (("closed", 0o644), ("open", 0o666)):
        path = ws / name
        path.write_text("orig\n")
        os.chown(path, NOBODY, NOBODY)
        path.chmod(mode)
    result = sh(runner, make_policy(WW, ws), "echo new > closed; echo closed=$?; echo new > open; echo open=$?")
    assert "closed=1" in result.out and "open=0" in result.out, result.out + result.err
    assert (ws / "closed").read_text() == "orig\n" and (ws / "open").read_text() == "new\n"
    assert any("mode bits" in r for r in runner.explain(make_policy(WW, ws)).rules)
