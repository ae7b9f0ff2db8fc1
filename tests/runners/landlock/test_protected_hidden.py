"""Protected and hidden paths: what Landlock can and cannot keep, and the refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.runners.landlock.rules import DEGRADE_HIDDEN, DEGRADE_HIDDEN_IN_ROOT, DEGRADE_METADATA, DEGRADE_PROTECTED
from dsh.runners.landlock.runner import PROCESS_LIST_GAP
from dsh.sandbox.errors import SandboxUnavailable

from tests.runners.landlock.helpers import RO, WW, make_policy, sh

Layout = tuple[Path, Path]


def _git_workspace(ws: Path) -> Path:
    git = ws / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    return git


def test_protected_path_in_writable_root_is_partial_and_refused(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    git = _git_workspace(ws)
    policy = make_policy(WW, ws, protected_paths=(git, ws / ".dsh"))
    enforcement = runner.enforcement(policy)
    assert enforcement.level == "partial"
    assert set(enforcement.degradations) == {DEGRADE_PROTECTED, DEGRADE_METADATA, PROCESS_LIST_GAP.degradation}
    assert any(f"cannot keep {git} read-only inside writable root {ws}" in m for m in enforcement.missing)
    with pytest.raises(SandboxUnavailable) as info:
        sh(runner, policy, "echo pwned > .git/HEAD")
    assert info.value.code == "SANDBOX_UNAVAILABLE"
    assert DEGRADE_PROTECTED in str(info.value)
    assert (git / "HEAD").read_text() == "ref: refs/heads/main\n"  # it never ran


def test_accepted_degradation_runs_and_the_gap_is_real(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    git = _git_workspace(ws)
    policy = make_policy(WW, ws, protected_paths=(git,), accept_degraded=(DEGRADE_PROTECTED,))
    assert runner.enforcement(policy).accepted_by(policy)
    result = sh(runner, policy, "echo changed > .git/HEAD")
    # The documented limitation: with "parent" grants the protected path is writable.
    assert result.returncode == 0, result.err
    assert (git / "HEAD").read_text() == "changed\n"


def test_protected_paths_are_trivially_kept_in_read_only(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    git = _git_workspace(ws)
    policy = make_policy(RO, ws, protected_paths=(git,))
    assert runner.enforcement(policy).degradations == (PROCESS_LIST_GAP.degradation,)  # only the process list
    assert sh(runner, policy, "echo x > .git/HEAD").returncode != 0
    assert (git / "HEAD").read_text() == "ref: refs/heads/main\n"


def test_siblings_strategy_keeps_protected_paths_read_only(layout: Layout) -> None:
    ws, _ = layout
    git = _git_workspace(ws)
    (ws / "src").mkdir()
    runner = LandlockRunner({"protected_paths": "siblings"})
    try:
        policy = make_policy(WW, ws, protected_paths=(git, ws / ".dsh"))
        # protected paths held
        assert runner.enforcement(policy).degradations == (DEGRADE_METADATA, PROCESS_LIST_GAP.degradation)
        attacks = [
            "echo x > .git/HEAD",  # directly
            "echo x > .git/hooks/pre-commit",  # create inside
            "rm -rf .git",  # remove
            "mv .git gone",  # rename the protected dir away
            "mkdir .dsh",  # create a missing protected path
            "ln -s .git/hooks hooklink && echo x > hooklink/post",  # via a symlink
        ]
        for attack in attacks:
            assert sh(runner, policy, attack).returncode != 0, attack
        assert (git / "HEAD").read_text() == "ref: refs/heads/main\n"
        assert list((git / "hooks").iterdir()) == []
        assert not (ws / ".dsh").exists() and not (ws / "gone").exists()
        # Elsewhere the workspace stays writable; the workspace's top level is frozen.
        ok = sh(runner, policy, "echo y > file.txt && echo z > src/new.txt && mkdir src/pkg")
        assert ok.returncode == 0, ok.err
        assert (ws / "src" / "new.txt").read_text() == "z\n"
        assert sh(runner, policy, "echo top > top.txt").returncode != 0
        assert any("no entry can be created" in rule for rule in runner.explain(policy).rules)
    finally:
        runner.close()


def test_hidden_paths_are_unreadable_and_refused_unless_accepted(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    (ws / ".env").write_text("TOKEN=hunter2\n")
    (outside / "keys").mkdir()
    (outside / "keys" / "id").write_text("PRIVATE\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "data").write_text("visible\n")
    hidden = (ws / ".env", outside / "keys")
    policy = make_policy(WW, ws, hidden_paths=hidden)
    enforcement = runner.enforcement(policy)
    assert enforcement.level == "partial"
    assert {DEGRADE_HIDDEN, DEGRADE_HIDDEN_IN_ROOT} <= set(enforcement.degradations)
    assert any(f"cannot hide {ws / '.env'}" in m for m in enforcement.missing)
    with pytest.raises(SandboxUnavailable):
        sh(runner, policy, "true")

    accepted = make_policy(WW, ws, hidden_paths=hidden, accept_degraded=(DEGRADE_HIDDEN, DEGRADE_HIDDEN_IN_ROOT))
    # Outside the workspace, the hidden tree's contents stay unreadable, however reached.
    for attack in (
        f"cat '{outside}/keys/id'",
        f"cat /proc/self/root{outside}/keys/id",
        f"cd '{outside}' && cat keys/id",
        f"cp '{outside}/keys/id' copy && cat copy",
    ):
        result = sh(runner, accepted, attack)
        assert "PRIVATE" not in result.out, attack
        assert result.returncode != 0, attack
    # Inside the workspace the hidden path is the declared gap: the workspace stays
    # readable as a whole, so files created later (by the command or the host) are
    # readable too.  This asserts the gap exactly as reported, so it cannot widen unseen.
    (ws / "later.txt").write_text("host wrote later\n")
    result = sh(runner, accepted, "cat .env later.txt && echo w > w.txt && cat w.txt")
    assert result.returncode == 0, result.err
    assert "hunter2" in result.out and "host wrote later" in result.out and "w\n" in result.out
    # Siblings of the hidden tree stay readable, and the workspace stays writable.
    result = sh(runner, accepted, f"cat file.txt '{outside}/secret.txt' '{outside}/sub/data' && echo w > w2.txt")
    assert result.returncode == 0, result.err
    assert "in workspace" in result.out and "original" in result.out and "visible" in result.out
    assert (ws / "w2.txt").exists()
