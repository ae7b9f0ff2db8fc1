"""The hostile host in the conformance harness, through a real runner.

A ``during`` action runs only after the command says it is ready and before
the command goes on; a setup that cannot stage its scenario is "unavailable",
never a pass; cleanups run whatever the outcome.
"""

from __future__ import annotations

import pytest
from dsh.cli.conformance import checks as c
from dsh.cli.conformance.harness import Harness
from dsh.cli.conformance.model import Expect, HostEnv, Scenario, Unavailable

from tests.support.sandboxed import need_runner

OK: dict[str, Expect] = {"read-only": "ok", "workspace-write": "ok"}


@pytest.fixture(autouse=True)
def _planted_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # The harness plants secrets in the environment unless some are there already.
    monkeypatch.setenv("DSHCONF_TOKEN", "dshconf-test-token")


def _run(*scenarios: Scenario) -> dict[str, tuple[str, str]]:
    need_runner("bwrap")
    (cell,) = Harness().run(["bwrap"], ["read-only"], scenarios)
    return {r.scenario: (r.outcome, r.detail) for r in cell.results}


def test_during_happens_after_ready_and_before_the_command_continues() -> None:
    order: list[str] = []

    def during(env: HostEnv) -> None:
        order.append("during")
        (env.outside / f"made-{env.nonce}").write_text("made mid-run\n")

    scenario = Scenario(
        "t-during", "test", "the host makes a file once the command is ready",
        ("bash", "-c", "test -e {outside}/made-{nonce} && echo early; echo DSH-READY;"
                       " read -t 15 go && echo DSH-GO; cat {outside}/made-{nonce}"),
        OK, check_ok=c.stdout_is(b"DSH-READY\nDSH-GO\nmade mid-run\n"), during=during)
    assert _run(scenario) == {"t-during": ("pass", "")}
    assert order == ["during"]


def test_a_command_that_never_gets_ready_fails_without_the_host_action() -> None:
    calls: list[str] = []
    scenario = Scenario("t-never", "test", "no marker", ("sh", "-c", "echo boom >&2; exit 3"), OK,
                        check_ok=c.exit_zero, during=lambda env: calls.append("during"))
    outcome, detail = _run(scenario)["t-never"]
    assert outcome == "fail" and "never printed the ready marker (exit=3" in detail and "boom" in detail
    assert calls == []


def test_a_command_that_never_reads_the_go_fails_instead_of_passing_on_nothing() -> None:
    # The check alone would pass: the command never looked at what the host made.
    scenario = Scenario("t-no-go", "test", "ready, but goes on without the host",
                        ("sh", "-c", "echo DSH-READY; exec 0</dev/null; sleep 0.2"), OK,
                        check_ok=c.exit_zero, during=lambda env: None)
    outcome, detail = _run(scenario)["t-no-go"]
    assert outcome == "fail" and "never read the host's go on its stdin" in detail, detail


def test_unstageable_setup_is_unavailable_and_cleanups_still_run() -> None:
    cleaned: list[str] = []

    def setup(env: HostEnv) -> None:
        env.cleanups.append(lambda: cleaned.append("cleaned"))
        raise Unavailable("this host cannot stage it")

    scenario = Scenario("t-unavailable", "test", "setup refuses", ("true",), OK, check_ok=c.exit_zero, setup=setup)
    assert _run(scenario) == {"t-unavailable": ("unavailable", "this host cannot stage it")}
    assert cleaned == ["cleaned"]


def test_a_failing_check_still_cleans_up() -> None:
    cleaned: list[str] = []
    scenario = Scenario("t-fail", "test", "check fails", ("true",), OK,
                        setup=lambda env: env.cleanups.append(lambda: cleaned.append("cleaned")),
                        check_ok=lambda env, out: "deliberate")
    outcome, detail = _run(scenario)["t-fail"]
    assert (outcome, detail) == ("fail", "deliberate")
    assert cleaned == ["cleaned"]


def test_a_limitation_excuses_refused_work_never_an_attack() -> None:
    """bwrap declares the ``unix-sockets`` limitation: a scenario that needs a unix
    server is excused, an attack on unix sockets is still judged by the host."""
    work = Scenario("t-work", "positive", "needs a unix server", ("true",), {"read-only": "ok"},
                    covers=("unix-sockets",))
    attack = Scenario("t-attack", "network", "reaches a host socket", ("false",), {"read-only": "blocked"},
                      covers=("unix-sockets",), check_blocked=lambda e, o: "the host was reached")
    outcomes = _run(work, attack)
    assert outcomes["t-work"][0] == "not-enforced" and "limitation" in outcomes["t-work"][1]
    assert outcomes["t-attack"] == ("fail", "the host was reached")
