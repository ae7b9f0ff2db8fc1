"""Overlapping path rules under bwrap: hidden wins, then the deepest rule (see ``overlaps``)."""

from __future__ import annotations

import pytest
from dsh.runners.bwrap import BwrapRunner

from tests.runners import overlaps
from tests.runners.bwrap.helpers import Layout, policy, sh


@pytest.mark.parametrize("case", overlaps.cases(), ids=lambda c: c.id)
def test_overlapping_rules(runner: BwrapRunner, layout: Layout, case: overlaps.Case) -> None:
    outer, inner = overlaps.make_tree(layout.ws, case)
    pol = overlaps.apply(policy(layout.ws), case, outer, inner)
    result = sh(runner, overlaps.SCRIPT, pol)
    assert result.returncode == 0, result.err
    assert overlaps.check_host(case, outer, inner, result.out) == []
    if case.inner_missing and not (inner / "new").exists():
        assert not inner.exists(), "a placeholder was left behind"


@pytest.mark.parametrize("name", [".env", ".env.local"])
def test_protected_and_hidden_file_is_unreadable_and_explained(
    runner: BwrapRunner, layout: Layout, name: str
) -> None:
    """The python and node profiles both protect and hide ``.env``."""
    secret = layout.ws / name
    secret.write_text("TOKEN=SECRET-CONTENT\n")
    pol = policy(layout.ws, protected=(".git", ".dsh", name), hidden=(secret,))
    assert runner.enforcement(pol).level == "full"
    rules = runner.explain(pol).rules
    assert f"mask-file {secret} (hidden)" in rules
    assert not any(r.startswith(f"ro-bind {secret} ") for r in rules)
    assert any(r.startswith(f"protected {secret}: inside hidden {secret}") for r in rules)
    result = sh(runner, f"cat {name}; echo x >> {name}; rm -f {name}; exit 0", pol)
    assert "SECRET-CONTENT" not in result.out
    assert secret.read_text() == "TOKEN=SECRET-CONTENT\n"
