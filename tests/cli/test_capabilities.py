"""One capability vocabulary: runners' degradations, the host's and the catalog speak it."""

from __future__ import annotations

import dataclasses

import pytest
from dsh.cli.conformance.catalog import SCENARIOS
from dsh.cli.conformance.harness import partial_capabilities
from dsh.runners.fake import FakeRunner
from dsh.sandbox import capability as cap
from dsh.sandbox.gate import HOST_DEGRADATIONS, SCAN_DEGRADATION
from dsh.sandbox.registry import runner_classes
from dsh.sandbox.runner import Enforcement, Gap


def test_every_declared_degradation_weakens_known_capabilities() -> None:
    classes = runner_classes()
    assert classes, "no runner registered"
    for name, cls in classes.items():
        assert cls.DEGRADATION_NAMES == tuple(cls.DEGRADATIONS)
        for degradation, capabilities in cls.DEGRADATIONS.items():
            assert degradation.startswith(f"{name}-"), degradation
            assert capabilities and all(cap.VOCABULARY[c.name] is c for c in capabilities), degradation
    for capabilities in HOST_DEGRADATIONS.values():
        assert all(cap.VOCABULARY[c.name] is c for c in capabilities)


def test_every_scenario_covers_known_capabilities() -> None:
    assert all(cap.by_name(name) for s in SCENARIOS for name in s.covers)
    with pytest.raises(KeyError, match="unknown capability 'protected-path'"):
        dataclasses.replace(SCENARIOS[0], covers=("protected-path",))


def test_degradations_reach_their_scenarios_through_capabilities() -> None:
    # A limit degradation whose name is not "<runner>-<capability>": matched all the same.
    memory = ("box-cgroup-missing", (cap.LIMITS_MEMORY, cap.LIMITS_PROCESSES))
    runner = FakeRunner("box", degradations=dict([memory]))
    enforcement = Enforcement.partial([Gap("box-cgroup-missing", "no cgroup here"),
                                       Gap(SCAN_DEGRADATION, "too deep")])
    reasons = partial_capabilities(runner, enforcement)
    assert reasons == {"limits-memory": "no cgroup here", "limits-processes": "no cgroup here",
                       "protected-paths": "too deep"}
    covered = {s.id for s in SCENARIOS if set(s.covers) & set(reasons)}
    assert {"lim-processes"} <= covered
