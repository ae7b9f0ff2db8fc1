"""After ``runsc start``, the gofer's own mount table must hold each pinned bind.

runsc's gofer binds every source by path, so a relative symlink swapped in
while it binds sends a writable bind elsewhere, and a name checked on the host
afterwards cannot tell.  The runner reads the gofer's mount table and refuses a
sandbox whose binds are not at their destinations, before any command runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from dsh.runners.gvisor import GvisorRunner
from dsh.runners.gvisor import sandbox as warm_sandbox
from dsh.runners.linux.mount_check import ExpectedMount, mount_problem
from dsh.sandbox.errors import SandboxUnavailable

from tests.runners.gvisor.helpers import policy, sh


def test_the_gofers_binds_are_checked_at_the_start(runner: GvisorRunner, ws: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[list[ExpectedMount]] = []

    def spy(pid: int, expected: Iterable[ExpectedMount]) -> str | None:
        wanted = list(expected)
        checked.append(wanted)
        return mount_problem(pid, wanted)

    monkeypatch.setattr(warm_sandbox, "mount_problem", spy)
    ran = sh(runner, "echo ran > ran", policy(ws))
    assert ran.status.exit_code == 0, ran.text
    assert (ws / "ran").read_text() == "ran\n"
    (wanted,) = checked
    paths = {m.path for m in wanted}
    assert {str(ws), str(ws / ".git")} <= paths
    assert all(m.identity is not None for m in wanted)


def test_a_sandbox_whose_gofer_bound_elsewhere_runs_nothing(runner: GvisorRunner, ws: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    outside = ws.parent / "outside"
    outside.mkdir()
    info = outside.stat()

    def plus_outside(pid: int, expected: Iterable[ExpectedMount]) -> str | None:
        # The plan with one more bind than the gofer made: what a bind sent
        # elsewhere looks like from the plan's side.
        return mount_problem(pid, [*expected, ExpectedMount(str(outside), (info.st_dev, info.st_ino))])

    monkeypatch.setattr(warm_sandbox, "mount_problem", plus_outside)
    with pytest.raises(SandboxUnavailable, match=rf"{outside} is not mounted at its own path.*nothing ran"):
        sh(runner, "echo ran > ran", policy(ws))
    assert not (ws / "ran").exists()


def test_a_start_that_fails_under_a_swap_names_the_swap(runner: GvisorRunner, ws: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # runsc fails its start when a source moves under it, with an error that
    # reads like "gVisor cannot run here": the refusal must name the change.
    real_runsc = warm_sandbox._runsc

    def swapped_during_create(argv: list[str], log: Path, pass_fds: Sequence[int] = ()) -> tuple[int, str]:
        if "create" in argv:
            (ws / ".git").rename(ws / "git-moved")
            (ws / ".git").mkdir()
            return 1, "cannot read client sync file: EOF"
        return real_runsc(argv, log, pass_fds)

    monkeypatch.setattr(warm_sandbox, "_runsc", swapped_during_create)
    with pytest.raises(SandboxUnavailable, match=rf"{ws / '.git'} changed while the sandbox was being prepared "
                                                 r"\(a bind source was replaced while runsc started; runsc: "
                                                 r"cannot read client sync file: EOF\)"):
        sh(runner, "echo ran > ran", policy(ws))
    assert not (ws / "ran").exists()
