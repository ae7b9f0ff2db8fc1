"""The fail-closed gate, directly: what it refuses, what it lets through, and
the refusal a person reads (grouped, deduplicated, with the flag that accepts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.gate import (
    MAX_PATHS,
    accept_hint,
    best_refused,
    check_accepted,
    refusal_lines,
    summarize,
    unaccepted,
)
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import Enforcement, Gap

WS = Path("/nonexistent-ws")


def policy(*accepted: str) -> SandboxPolicy:
    return SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=WS, accept_degraded=accepted)


PARTIAL = Enforcement.partial([
    Gap("toy-paths", "cannot keep /nonexistent-ws/.git read-only"),
    Gap("toy-net", "cannot stop TCP"),
    Gap("toy-paths", "cannot keep /nonexistent-ws/.dsh read-only"),
])


def test_full_enforcement_is_never_refused() -> None:
    assert unaccepted(Enforcement.full(), policy()) == ()
    check_accepted(Enforcement.full(), policy(), runner="toy")  # does not raise
    assert refusal_lines(Enforcement.full(), policy()) == []


def test_every_degradation_must_be_accepted_by_name() -> None:
    assert unaccepted(PARTIAL, policy()) == ("toy-paths", "toy-net")
    assert unaccepted(PARTIAL, policy("toy-net")) == ("toy-paths",)
    assert unaccepted(PARTIAL, policy("toy-net", "toy-paths")) == ()
    with pytest.raises(SandboxUnavailable) as caught:
        check_accepted(PARTIAL, policy("toy-net"), runner="toy")
    assert caught.value.degradations == ("toy-paths",)
    assert caught.value.runner == "toy"
    assert caught.value.code == "SANDBOX_UNAVAILABLE"
    check_accepted(PARTIAL, policy("toy-paths", "toy-net"), runner="toy")


def test_accepting_another_name_accepts_nothing() -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        check_accepted(PARTIAL, policy("TOY-NET", "toy-paths-", "*"), runner="toy")
    assert caught.value.degradations == ("toy-paths", "toy-net")


def test_the_refusal_says_what_is_open_and_the_flags_that_accept_it() -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        check_accepted(PARTIAL, policy(), runner="toy")
    assert str(caught.value).splitlines() == [
        "SANDBOX_UNAVAILABLE: toy: enforces workspace-write only partially; nothing ran:",
        "  toy-paths: cannot keep {/nonexistent-ws/.git, /nonexistent-ws/.dsh} read-only",
        "  toy-net: cannot stop TCP",
        "to accept: --accept-degraded toy-paths --accept-degraded toy-net (or accept_degraded in the profile)",
    ]


def test_accept_hint_pins_the_runner_under_auto() -> None:
    assert accept_hint(["a", "b"]) == (
        "to accept: --accept-degraded a --accept-degraded b (or accept_degraded in the profile)"
    )
    assert accept_hint(["a"], runner="toy") == (
        "to run on toy as it is: --runner toy --accept-degraded a (or runner and accept_degraded in the config)"
    )


def test_best_refused_is_the_fewest_degradations_then_auto_order() -> None:
    assert best_refused([]) is None
    assert best_refused([("a", ("x", "y")), ("b", ("x",)), ("c", ("z",))]) == ("b", ("x",))
    assert best_refused([("a", ("x",)), ("b", ("y",))]) == ("a", ("x",))


def test_summarize_keeps_each_reason_once_and_groups_paths(tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    gone = [f"/nonexistent-{i}" for i in range(5)]
    reasons = [f"cannot protect {p} here" for p in [*gone, str(here)]] + ["no TCP rules", "no TCP rules"]
    lines = summarize(reasons)
    # Existing paths first, at most MAX_PATHS shown, the rest counted.
    shown = ", ".join([str(here), *gone[: MAX_PATHS - 1]])
    assert lines == [f"cannot protect {{{shown}, +{6 - MAX_PATHS} more}} here", "no TCP rules"]


def test_summarize_leaves_one_path_alone_and_ignores_non_paths() -> None:
    assert summarize(["cannot protect /a/b (yet)"]) == ["cannot protect /a/b (yet)"]
    assert summarize(["ABI 3 lacks it", "ABI 3 lacks it"]) == ["ABI 3 lacks it"]
    # A repeated path is one path, not a group of two.
    assert summarize(["x /p y", "x /p y"]) == ["x /p y"]


def test_refusal_lines_take_the_indent() -> None:
    assert refusal_lines(Enforcement.partial([Gap("toy-x", "r")]), policy(), indent="- ") == ["- toy-x: r"]
