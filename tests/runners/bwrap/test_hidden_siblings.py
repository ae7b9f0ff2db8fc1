"""A directory whose entries are hidden but for a few: one mask over it, the rest bound again.

dsh-sandbox's own state hides every other workspace's HOME, one entry each:
mounted one by one, bwrap's setup grew with the square of their number.  The
plan masks their directory once and binds the run's own HOME (a writable
root) and any other entry that is not hidden back on top.  What the command
can see and write must be exactly what the per-entry masks gave it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.runners.bwrap.mounts import plan_mounts
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import LocalLaunch

from tests.runners.bwrap.helpers import Layout, policy, sh, spawn
from tests.support.wait import PATIENCE_S


@pytest.fixture
def state() -> Iterator[Path]:
    """Outside /tmp (the plan keeps per-entry masks there: the private /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="dsh-hidden-siblings-", dir="/var/tmp")).resolve()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _fill(state: Path) -> tuple[list[Path], Path, Path]:
    others = []
    for name in ("ws-a", "ws-b", "ws-c", "ws-d"):
        (state / name).mkdir()
        (state / name / ".git-credentials").write_text(f"SECRET-{name}\n")
        others.append(state / name)
    (state / "spill.out").write_text("SECRET-spill\n")
    others.append(state / "spill.out")
    own = state / "own"
    own.mkdir()
    shown = state / "shown"
    shown.mkdir()
    (shown / "note").write_text("visible\n")
    return others, own, shown


SCRIPT = (
    "cat {s}/ws-a/.git-credentials {s}/ws-d/.git-credentials {s}/spill.out 2>/dev/null; "
    "ls -a {s}/ws-b 2>/dev/null; echo listed:; ls {s}; "
    "echo mine > {s}/own/f && echo own-written; "
    "cat {s}/shown/note; echo x > {s}/shown/new 2>/dev/null && echo shown-written; "
    "echo x > {s}/ws-new 2>/dev/null && echo dir-written; "
    "echo x > {s}/ws-a/planted 2>/dev/null && echo other-written; exit 0"
)


def test_one_mask_over_hidden_siblings_and_the_rest_bound_again(
    runner: BwrapRunner, layout: Layout, state: Path
) -> None:
    others, own, shown = _fill(state)
    pol = policy(layout.ws, roots=(layout.ws, own), hidden=tuple(others))
    mounts = [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    assert ("mask-dir", str(state)) in mounts
    assert not any(path.startswith(f"{state}/ws-") or path == f"{state}/spill.out" for _k, path in mounts), mounts
    assert ("bind", str(own)) in mounts and ("ro-bind", str(shown)) in mounts
    assert mounts.index(("mask-dir", str(state))) < mounts.index(("bind", str(own)))

    result = sh(runner, SCRIPT.format(s=state), pol)
    assert result.returncode == 0, result.err
    assert "SECRET" not in result.out
    listed = result.out.split("listed:", 1)[1].split()
    assert sorted(listed[: listed.index("own-written")]) == ["own", "shown"]
    assert "own-written" in result.out and (own / "f").read_text() == "mine\n"
    assert "visible" in result.out
    assert "shown-written" not in result.out and not (shown / "new").exists()
    assert "dir-written" not in result.out and not (state / "ws-new").exists()
    assert "other-written" not in result.out and not (state / "ws-a" / "planted").exists()


def test_read_only_mode_shows_the_unhidden_entries(runner: BwrapRunner, layout: Layout, state: Path) -> None:
    others, own, shown = _fill(state)
    pol = policy(layout.ws, SandboxMode.READ_ONLY, hidden=tuple(others))
    assert ("mask-dir", str(state)) in [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    result = sh(runner, SCRIPT.format(s=state), pol)
    assert "SECRET" not in result.out
    assert "visible" in result.out
    assert "own-written" not in result.out and not (own / "f").exists()
    assert "shown-written" not in result.out and not (shown / "new").exists()


def test_a_directory_in_a_writable_root_keeps_per_entry_masks(runner: BwrapRunner, layout: Layout) -> None:
    """New entries there are writable: a mask over the directory would take that away."""
    cache = layout.ws / "cache"
    cache.mkdir()
    hidden = []
    for name in ("a", "b", "c"):
        (cache / name).mkdir()
        hidden.append(cache / name)
    pol = policy(layout.ws, hidden=tuple(hidden))
    mounts = [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    assert ("mask-dir", str(cache)) not in mounts
    assert all(("mask-dir", str(h)) in mounts for h in hidden)
    result = sh(runner, "echo x > cache/new && echo written", pol)
    assert "written" in result.out and (cache / "new").exists()


def test_a_link_among_the_entries_keeps_per_entry_masks(layout: Layout, state: Path) -> None:
    others, own, _shown = _fill(state)
    (state / "link").symlink_to(own)
    pol = policy(layout.ws, roots=(layout.ws, own), hidden=tuple(others))
    mounts = [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    assert ("mask-dir", str(state)) not in mounts
    assert ("mask-dir", str(state / "ws-a")) in mounts


def test_a_hidden_entry_removed_before_the_mounts_does_not_fail_the_run(
    runner: BwrapRunner, layout: Layout, state: Path
) -> None:
    """Another session ends between the plan and bwrap's mounts: its directory
    is gone.  One mask over the directory does not name it, so the run starts
    (a mask of its own made bwrap fail: ``Can't remount readonly``)."""
    own = state / "own"
    own.mkdir()
    (state / "session-other").mkdir()
    pol = policy(layout.ws, roots=(layout.ws, own), hidden=(state / "session-other",))
    assert ("mask-dir", str(state)) in [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    launch = runner.prepare(["/bin/sh", "-c", f"ls {state}; echo ran"], pol, cwd=str(layout.ws), env=dict(os.environ))
    assert isinstance(launch, LocalLaunch)
    try:
        (state / "session-other").rmdir()
        proc = spawn(launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if launch.cleanup is not None:
            launch.cleanup()
    assert proc.returncode == 0, err
    assert out.decode().split() == ["own", "ran"]


def test_an_entry_made_after_the_start_in_a_state_directory_is_hidden(
    runner: BwrapRunner, layout: Layout, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running command (a job, a terminal, an MCP session) must not read
    the HOME of a workspace, or the private /tmp of a session, made after it
    started, even when its state directory held nothing else to hide then."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(state))
    homes = state / "dsh-sandbox" / "home"
    own = homes / "own-ws"
    own.mkdir(parents=True)
    pol = policy(layout.ws, roots=(layout.ws, own))  # nothing else in homes/: nothing listed to hide
    assert ("mask-dir", str(homes)) in [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    def late() -> None:
        (homes / "late-ws").mkdir()
        (homes / "late-ws" / ".git-credentials").write_text("SECRET-late\n")

    out = _run_while(runner, layout, pol, f"cat {homes}/late-ws/.git-credentials 2>/dev/null; "
                     f"ls {homes}; echo mine > {own}/f && echo own-written", late)
    assert b"SECRET" not in out and b"late-ws" not in out, out
    assert b"own-written" in out and (own / "f").read_text() == "mine\n"


def test_a_spill_directory_empty_at_the_start_stays_hidden_when_a_session_fills_it(
    runner: BwrapRunner, layout: Layout, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state directory that leads to nothing the run keeps (the spill files'
    one) and holds nothing to hide at the start is masked all the same: a
    session that spills during the run must not be readable."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(state))
    spills = state / "dsh-sandbox"
    spills.mkdir(mode=0o700)
    pol = policy(layout.ws, roots=(layout.ws,))
    assert ("mask-dir", str(spills)) in [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    def late() -> None:
        (spills / "session-late").mkdir(mode=0o700)
        (spills / "session-late" / "stdout.log").write_text("SECRET-output\n")

    out = _run_while(runner, layout, pol, f"cat {spills}/*/* 2>/dev/null; echo done", late)
    assert b"SECRET" not in out and b"done" in out, out


def _run_while(runner: BwrapRunner, layout: Layout, pol: SandboxPolicy, script: str,
               during: Callable[[], None]) -> bytes:
    """Run ``script`` once ``during`` (the host's change) is done, started before it; its stdout."""
    go = layout.ws / "go"
    launch = runner.prepare(["/bin/sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; {script}"], pol,
                            cwd=str(layout.ws), env=dict(os.environ))
    assert isinstance(launch, LocalLaunch)
    proc = spawn(launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        during()
        go.touch()
        out, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if launch.cleanup is not None:
            launch.cleanup()
    assert proc.returncode == 0, err
    return out
