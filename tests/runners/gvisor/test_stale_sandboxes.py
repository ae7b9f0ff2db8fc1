"""A sandbox of an older policy shape goes once no command runs in it.

A session keeps one warm sandbox per shape.  One the session no longer uses
keeps its mounts (a root the new policy dropped stays writable there),
whatever was left running in it, and the descriptors that hold its sources:
a long conformance run, whose policy changes with every repository a scenario
makes, ran out of descriptors under a login session's limit of 1,024.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.gvisor import GvisorRunner
from dsh.runners.gvisor.sandbox import WarmSandbox

from tests.runners.gvisor.helpers import finish, policy, sh, start
from tests.support.require import require_runner
from tests.support.wait import wait_until


@pytest.fixture
def runner() -> Iterator[GvisorRunner]:
    instance = GvisorRunner()
    require_runner("gvisor", instance)
    yield instance
    instance.close()


def _only_sandbox(runner: GvisorRunner) -> WarmSandbox:
    assert len(runner._warm) == 1, list(runner._warm)
    return next(iter(runner._warm.values()))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_sandbox_of_an_older_shape_is_removed_when_another_becomes_current(runner: GvisorRunner,
                                                                               ws: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    assert sh(runner, "true", policy(ws)).status.exit_code == 0
    first = _only_sandbox(runner)
    assert first.alive()
    ran = sh(runner, f"echo x > {extra}/written && echo ok", policy(ws, roots=(ws, extra)))
    assert ran.out == b"ok\n", ran.text
    second = _only_sandbox(runner)
    assert second is not first
    assert first.closed
    wait_until(lambda: not first.alive(), "the older sandbox to die")
    # Back to the first shape: a fresh sandbox, and extra is not writable in it.
    ran = sh(runner, f"echo y > {extra}/again; test -e {extra}/again && echo wrote", policy(ws))
    assert b"wrote" not in ran.out and not (extra / "again").exists(), ran.text
    assert second.closed


def test_a_stale_sandbox_with_a_running_command_goes_when_that_command_ends(runner: GvisorRunner,
                                                                           ws: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (ws / "go").unlink(missing_ok=True)
    slow = start(runner, ["/bin/sh", "-c", "while ! test -e go; do sleep 0.1; done; echo finished"], policy(ws))
    first = _only_sandbox(runner)
    assert sh(runner, "echo other", policy(ws, roots=(ws, extra))).out == b"other\n"
    # The other shape is current, but a command still runs here: not killed under it.
    assert not first.closed and first.stale and first.alive()
    (ws / "go").touch()
    ran = finish(slow)
    assert ran.out == b"finished\n", ran.text
    assert first.closed
    wait_until(lambda: not first.alive(), "the stale sandbox to die")
    assert len(runner._warm) == 1


def test_a_command_that_fails_to_start_is_not_counted_as_running(runner: GvisorRunner, ws: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import dsh.runners.gvisor.process as process

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no exec today")

    with monkeypatch.context() as patched:
        patched.setattr(process, "RunscExec", broken)
        with pytest.raises(RuntimeError, match="no exec today"):
            sh(runner, "true", policy(ws))
    used = _only_sandbox(runner)
    assert used.idle(), (used.pending, used.running)
    # Idle, so a new shape retires it at once.
    extra = tmp_path / "extra"
    extra.mkdir()
    assert sh(runner, "echo other", policy(ws, roots=(ws, extra))).out == b"other\n"
    assert used.closed


def test_a_session_whose_policy_keeps_changing_holds_no_descriptors_per_shape(runner: GvisorRunner, ws: Path,
                                                                              tmp_path: Path) -> None:
    counts = []
    for n in range(6):
        extra = tmp_path / f"root{n}"
        extra.mkdir()
        assert sh(runner, "true", policy(ws, roots=(ws, extra))).status.exit_code == 0
        counts.append(_open_fds())
        assert len(runner._warm) == 1
    # One sandbox's worth, whichever shape: not a sandbox's worth more per shape.
    assert counts[-1] - counts[1] < 5, counts
