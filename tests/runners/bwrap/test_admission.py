"""bwrap holds the command back until dsh has checked the sandbox's mounts.

bwrap binds each ``--bind-fd`` by the name it resolves to, so a relative
symlink swapped in while it mounts can send a writable bind elsewhere; the
runner starts bwrap with ``--block-fd`` and lets the command start only when
every planned mount is where the plan put it (``SandboxLifecycle.admit``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterable

import pytest
from dsh.runners.bwrap import BwrapRunner, lifecycle
from dsh.runners.linux.mount_check import ExpectedMount, mount_problem
from dsh.sandbox.errors import SandboxUnavailable

from tests.runners.bwrap.helpers import Layout, policy, sh
from tests.support.processes import describe, pids_with
from tests.support.wait import PATIENCE_S, wait_until


def test_every_planned_mount_is_checked_before_the_command_runs(
    runner: BwrapRunner, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[list[ExpectedMount]] = []

    def spy(pid: int, expected: Iterable[ExpectedMount]) -> str | None:
        wanted = list(expected)
        checked.append(wanted)
        # Checked while pid 1 waits: the command has not written yet.
        assert not (layout.ws / "ran").exists()
        return mount_problem(pid, wanted)

    monkeypatch.setattr(lifecycle, "mount_problem", spy)
    result = sh(runner, "echo ran > ran", policy(layout.ws))
    assert result.returncode == 0, result.stderr
    assert (layout.ws / "ran").read_text() == "ran\n"
    (wanted,) = checked
    by_path = {m.path: m for m in wanted}
    assert str(layout.ws) in by_path and not by_path[str(layout.ws)].read_only
    assert by_path[str(layout.ws / ".git")].read_only


def test_a_sandbox_that_fails_the_check_is_killed_before_its_command(
    runner: BwrapRunner, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = f"dsh-admission-{uuid.uuid4().hex}"
    monkeypatch.setattr(lifecycle, "mount_problem",
                        lambda pid, expected: f"{layout.ws} is not mounted at its own path in the sandbox")
    with pytest.raises(SandboxUnavailable, match=r"not mounted at its own path.*nothing ran"):
        sh(runner, f"echo {mark} > ran; sleep 30 # {mark}", policy(layout.ws))
    assert not (layout.ws / "ran").exists()
    wait_until(lambda: not pids_with(mark), what=lambda: f"no process left: {describe(pids_with(mark))}")


def test_the_real_check_refuses_a_mount_that_is_not_where_planned(
    runner: BwrapRunner, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan says one more writable bind (the outside directory) than
    bwrap made: what a bind sent elsewhere looks like from the plan's side."""
    def plus_outside(pid: int, expected: Iterable[ExpectedMount]) -> str | None:
        info = layout.outside.stat()
        return mount_problem(pid, [*expected, ExpectedMount(str(layout.outside), (info.st_dev, info.st_ino))])

    monkeypatch.setattr(lifecycle, "mount_problem", plus_outside)
    with pytest.raises(SandboxUnavailable, match=f"{layout.outside} is not mounted at its own path"):
        sh(runner, "echo ran > ran", policy(layout.ws))
    assert not (layout.ws / "ran").exists()


def test_bare_bwrap_for_the_baseline_is_not_held_back(runner: BwrapRunner, layout: Layout) -> None:
    baseline = runner.baseline(policy(layout.ws), str(layout.ws))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            baseline.run()  # held back, it would wait forever on the block fd
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        worker.join(PATIENCE_S)
        assert not worker.is_alive(), "bare bwrap never finished: held back like a dsh launch"
        assert not errors, errors
    finally:
        if baseline.close is not None:
            baseline.close()


def test_the_admission_is_in_the_launch(runner: BwrapRunner, layout: Layout) -> None:
    launch = runner.prepare(["true"], policy(layout.ws), cwd=str(layout.ws), env={})
    try:
        assert "--block-fd" in launch.argv  # type: ignore[union-attr]
        assert launch.spawn_in is not None  # type: ignore[union-attr]
    finally:
        assert launch.cleanup is not None
        launch.cleanup()


def test_asking_whether_bwrap_exited_during_setup_leaves_it_to_the_executor() -> None:
    """bwrap dead in setup must still be there for the executor to wait for:
    reaped by the admission's check (``Popen.poll``), its pid could no longer
    be watched and the run failed with "No such process" instead of bwrap's error."""
    from dsh.runners.bwrap.runner import _exited

    child = subprocess.Popen(["true"])
    wait_until(lambda: _exited(child.pid), "the child to exit")
    assert os.waitpid(child.pid, 0)[0] == child.pid  # not reaped by the question
    child.returncode = 0  # reaped here: Popen must not wait for it again
