"""Another session's state removed while a run's sandbox is set up.

Every run hides the places other sessions of its user keep their state (the
recorded state places).  A session that ends, or a test suite whose scratch
cache goes, removes its place; when that happens between a run's plan and
bwrap's mounts, bwrap cannot make the mask (``Can't mkdir``) and the command
failed with bwrap's own message.  Nothing ran, so the run is planned again
from the host as it now is.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.runners.bwrap.lifecycle import SandboxLifecycle
from dsh.sandbox import state_places
from dsh.sandbox.context import Context
from dsh.sandbox.errors import SandboxChanged, SandboxUnavailable
from dsh.sandbox.host import SandboxHost
from dsh.sandbox.policy_service import PolicyService
from dsh.sandbox.session import SessionSpec, build_session

from tests.support.executors import run
from tests.support.require import require_runner


@pytest.fixture
def place(trusted_dir: Path) -> Path:
    """A state place a session started with another environment recorded."""
    made = trusted_dir / "other-cache" / "dsh-sandbox"
    (made / "homes" / "elsewhere").mkdir(parents=True)
    state_places.record([made])
    return made


@pytest.fixture
def session(trusted_dir: Path) -> Iterator[Context]:
    require_runner("bwrap")
    ws = trusted_dir / "ws"
    ws.mkdir()
    with build_session(SessionSpec(mode="workspace-write", workspace=str(ws), runner="bwrap",
                                   executor="bash-sandbox", executor_config={"cwd": str(ws)})) as ctx:
        yield ctx


def _remove_after_planning(ctx: Context, place: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The place goes right after the first plan, before bwrap mounts anything."""
    runner = ctx.require(SandboxHost).runner("bwrap")
    assert runner is not None
    original = runner.wrap
    launches: list[Any] = []

    def wrap(*args: Any, **kwargs: Any) -> Any:
        launch = original(*args, **kwargs)
        launches.append(launch)
        if len(launches) == 1:
            shutil.rmtree(place.parent)  # the plan may mask either (one mask over a directory of hidden entries)
        return launch

    monkeypatch.setattr(runner, "wrap", wrap)
    return launches


def test_a_state_place_removed_during_setup_is_planned_again(session: Context, place: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    launches = _remove_after_planning(session, place, monkeypatch)
    result = run(session, "echo ran")
    assert result.exit_code == 0 and result.stdout.text == "ran\n", (result.exit_code, result.stderr.text)
    assert len(launches) == 2  # the first sandbox never started its command
    assert not place.exists()  # not made again by the mask


def test_the_vanished_mask_is_named_and_nothing_ran(session: Context, place: Path, trusted_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that keeps losing its masks: a clean refusal, never the command, and never bwrap's own message."""
    runner = session.require(SandboxHost).runner("bwrap")
    service = session.require(PolicyService)
    assert runner is not None
    original_wrap, original_resolve = runner.wrap, service.resolve
    marker = trusted_dir / "ws" / "ran"

    def resolve(*args: Any, **kwargs: Any) -> Any:
        (place / "homes" / "elsewhere").mkdir(parents=True, exist_ok=True)
        return original_resolve(*args, **kwargs)

    def wrap(*args: Any, **kwargs: Any) -> Any:
        launch = original_wrap(*args, **kwargs)
        shutil.rmtree(place.parent)  # the plan may mask either (one mask over a directory of hidden entries)
        return launch

    monkeypatch.setattr(service, "resolve", resolve)
    monkeypatch.setattr(runner, "wrap", wrap)
    seen: list[SandboxChanged] = []
    admit = SandboxLifecycle.admit

    def watched(self: SandboxLifecycle, pid: int, exited: Any) -> None:
        try:
            admit(self, pid, exited)
        except SandboxChanged as exc:
            seen.append(exc)
            raise

    monkeypatch.setattr(SandboxLifecycle, "admit", watched)
    with pytest.raises(SandboxUnavailable, match="nothing ran"):
        run(session, f"touch {marker}")
    assert not marker.exists()
    assert seen and "planned hidden, was removed while the sandbox was set up" in str(seen[0])
