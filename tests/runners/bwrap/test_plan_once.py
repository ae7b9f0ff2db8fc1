"""The gate and the launch of one command use one mount plan: ``enforcement``
plans, the ``wrap`` right after it on the same thread takes that plan (what
was gated is what is mounted), and anything later plans anew."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.runners.bwrap import runner as bwrap_runner

from tests.runners.bwrap.helpers import Layout, policy, spawn


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    real = bwrap_runner.plan_mounts

    def plan(p: object) -> object:
        calls.append(p)
        return real(p)  # type: ignore[arg-type]

    monkeypatch.setattr(bwrap_runner, "plan_mounts", plan)
    return calls


def _run(runner: BwrapRunner, launch_policy: object, ws: Path) -> int:
    launch = runner.prepare(("true",), launch_policy, cwd=str(ws), env={"PATH": "/usr/bin:/bin"})  # type: ignore[arg-type]
    proc = spawn(launch)  # type: ignore[arg-type]
    try:
        return proc.wait(timeout=60)
    finally:
        launch.cleanup()


def test_a_launch_uses_the_plan_its_gate_judged(runner: BwrapRunner, layout: Layout,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    pol = policy(layout.ws)
    assert _run(runner, pol, layout.ws) == 0
    assert len(calls) == 1  # planned once, for both the gate and the mounts


def test_a_later_launch_or_another_policy_plans_anew(runner: BwrapRunner, layout: Layout,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    first, second = policy(layout.ws), policy(layout.ws, hidden=(layout.outside,))
    runner.enforcement(first)
    assert _run(runner, second, layout.ws) == 0  # gated and planned for its own policy
    assert calls[-1] is second and calls.count(first) == 1
    monkeypatch.setattr(bwrap_runner, "PLAN_REUSE_S", 0.0)
    assert _run(runner, first, layout.ws) == 0
    assert calls.count(first) == 3  # the gate's plan was too old for the launch: planned again
