"""File metadata (chmod, chown, utime, xattr): Landlock has no right for it.

Read-only mode refuses the syscalls with seccomp; workspace-write reports the
gap (``landlock-metadata``) and refuses to run unless the profile accepts it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.rules import DEGRADE_METADATA
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.policy import SandboxPolicy

from tests.runners.landlock.helpers import RO, WW, make_policy, sh

Layout = tuple[Path, Path]


def _victim(outside: Path) -> Path:
    victim = outside / "victim"
    victim.write_text("orig\n")
    victim.chmod(0o644)
    os.utime(victim, (1_000_000, 1_000_000))
    return victim


def test_read_only_refuses_metadata_changes_outside(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    victim = _victim(outside)
    policy = make_policy(RO, ws)
    assert DEGRADE_METADATA not in runner.enforcement(policy).degradations
    for attack in (f"chmod 777 '{victim}'", f"chown 0:0 '{victim}'", f"touch -d 2001-01-01 '{victim}'",
                   f"setfattr -n user.x -v 1 '{victim}' || python3 -c \"import os; os.setxattr('{victim}', "
                   "'user.x', b'1')\""):
        assert sh(runner, policy, attack).returncode != 0, attack
    info = victim.stat()
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_mtime == 1_000_000
    assert not os.listxattr(victim)


def test_workspace_write_reports_the_gap_and_refuses_unless_accepted(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    bare = SandboxPolicy(mode=WW, workspace=ws, writable_roots=(ws,))
    enforcement = runner.enforcement(bare)
    assert DEGRADE_METADATA in enforcement.degradations
    assert any("chmod" in m for m in enforcement.missing)
    with pytest.raises(SandboxUnavailable):
        runner.prepare(["true"], bare, cwd=str(ws), env={})
    # Accepted, the gap is real (this asserts it exactly as reported), while the
    # workspace's own files keep working.
    victim = _victim(outside)
    accepted = make_policy(WW, ws)
    assert sh(runner, accepted, f"chmod 600 '{victim}' && touch f && chmod +x f && test -x f").returncode == 0
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
