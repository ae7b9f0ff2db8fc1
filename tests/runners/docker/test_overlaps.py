"""Overlapping path rules in the container: hidden wins, then the deepest rule (see ``overlaps``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runners import overlaps
from tests.runners.docker.helpers import docker_runner, policy, sh


@pytest.mark.parametrize("case", overlaps.cases(), ids=lambda c: c.id)
def test_overlapping_rules(workspace: Path, case: overlaps.Case) -> None:
    outer, inner = overlaps.make_tree(workspace, case)
    pol = overlaps.apply(policy(workspace), case, outer, inner)
    with docker_runner() as runner:
        result = sh(runner, overlaps.SCRIPT, pol)
    assert result.status.exit_code == 0, result.stderr
    assert overlaps.check_host(case, outer, inner, result.stdout.decode()) == []
