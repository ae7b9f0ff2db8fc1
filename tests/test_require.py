"""The requirement check: what CI requires fails instead of skipping, cgroups included."""

from __future__ import annotations

import pytest

from tests.support.require import need_cgroup, required, unavailable


def test_a_missing_feature_skips_when_nothing_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSH_REQUIRE", raising=False)
    monkeypatch.delenv("DSH_REQUIRE_RUNNERS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="SANDBOX_UNAVAILABLE: cgroup: none here"):
        unavailable("cgroup", "none here")


@pytest.mark.parametrize("var", ["DSH_REQUIRE", "DSH_REQUIRE_RUNNERS"])
def test_a_required_one_fails(monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    monkeypatch.delenv("DSH_REQUIRE", raising=False)
    monkeypatch.delenv("DSH_REQUIRE_RUNNERS", raising=False)
    monkeypatch.setenv(var, "bwrap, cgroup")
    assert required() == {"bwrap", "cgroup"}
    with pytest.raises(pytest.fail.Exception, match="required by DSH_REQUIRE"):
        unavailable("cgroup", "none here")


def test_no_cgroup_hierarchy_fails_the_limit_tests_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without a cgroup the tests can use (here: no hierarchy asked for at
    all) cannot let the limit tests skip silently where CI requires cgroups."""
    monkeypatch.setenv("DSH_REQUIRE", "cgroup")
    with pytest.raises(pytest.fail.Exception, match="cgroup: no cgroup this process can create"):
        need_cgroup("pids", versions=())
