"""Probe, enforcement, explain and plan of the bwrap runner."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from dsh.runners.bwrap import BwrapRunner
from dsh.runners.bwrap.mounts import plan_mounts
from dsh.runners.linux.ipc import UNIX_SOCKET_LIMITATION
from dsh.sandbox.errors import SandboxUnavailable, UsageError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.runner import LocalLaunch

from tests.runners.bwrap.helpers import Layout, policy, run, sh


def test_probe_reports_version_and_is_cached(runner: BwrapRunner) -> None:
    probe = runner.probe()
    assert probe.available and probe.reason is None
    assert probe.version is not None and probe.version.startswith("bubblewrap")
    assert runner.facts() is runner.facts()


def test_missing_binary_is_unavailable_with_install_hint(layout: Layout) -> None:
    missing = BwrapRunner({"bwrap": f"/nonexistent/{uuid.uuid4().hex}/bwrap"})
    probe = missing.probe()
    assert not probe.available
    assert probe.reason is not None and "apt-get install bubblewrap" in probe.reason
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as info:
        missing.prepare(["true"], policy(layout.ws), cwd=str(layout.ws), env={})
    assert info.value.code == "SANDBOX_UNAVAILABLE"


def test_a_bwrap_that_cannot_sandbox_is_unavailable(tmp_path: Path, layout: Layout) -> None:
    """A binary that fails the trial run (as bwrap does with user namespaces blocked)."""
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && exec echo 'bubblewrap 0.0'\n"
        "echo 'bwrap: No permissions to create new namespace' >&2; exit 1\n"
    )
    fake.chmod(0o755)
    probe = BwrapRunner({"bwrap": str(fake)}).probe()
    assert not probe.available
    assert probe.reason is not None
    assert "No permissions to create new namespace" in probe.reason
    assert "user namespaces" in probe.reason


def test_empty_argv_is_a_usage_error(runner: BwrapRunner, layout: Layout) -> None:
    with pytest.raises(UsageError, match="argv"):
        runner.prepare([], policy(layout.ws), cwd=str(layout.ws), env={})


def test_full_enforcement_and_explain(runner: BwrapRunner, layout: Layout) -> None:
    pol = policy(layout.ws)
    assert runner.enforcement(pol).level == "full"
    plan = runner.explain(pol)
    rules = "\n".join(plan.rules)
    assert f"bind {layout.ws} (writable root)" in rules
    assert f"ro-bind {layout.ws}/.git (protected)" in rules
    assert f"placeholder {layout.ws}/.dsh" in rules
    assert plan.network.startswith("off")
    # Nothing is left unenforced; the one thing it says it cannot do is work it refuses.
    assert plan.cannot == (UNIX_SOCKET_LIMITATION,)
    assert runner.limitations(pol) == {"unix-sockets": UNIX_SOCKET_LIMITATION}
    assert runner.explain(policy(layout.ws, network=True)).network.startswith("on")


def test_read_only_plan_has_no_writable_mount(layout: Layout) -> None:
    from dsh.sandbox.own_state import state_parents

    plan = plan_mounts(policy(layout.ws, SandboxMode.READ_ONLY, hidden=(layout.outside,)))
    state = state_parents(())  # this machine's own state directories, masked whole
    own = [m.kind for m in plan.mounts if m.why != "host unix socket" and m.path not in state]
    assert own == ["mask-dir"]
    assert not any(m.writable for m in plan.mounts)


def test_more_specific_rules_win(layout: Layout) -> None:
    """A root inside a read-only path inside a root: bind, ro-bind, bind, in depth order.

    Pins are only added where the tree is writable: the read-only ``docs`` is
    never re-bound read-write to pin the nested root's protected paths.
    """
    docs = layout.ws / "docs"
    cache = docs / "cache"
    cache.mkdir(parents=True)
    pol = policy(layout.ws, roots=(layout.ws, cache), read_only=(docs,))
    mounts = [(m.kind, m.path) for m in plan_mounts(pol).mounts]
    order = [mounts.index(("bind", str(layout.ws))), mounts.index(("ro-bind", str(docs)))]
    order.append(mounts.index(("bind", str(cache))))
    assert order == sorted(order)
    assert ("pin", str(docs)) not in mounts
    assert ("placeholder", str(cache / ".git")) in mounts


def test_root_inside_read_only_path_is_writable(runner: BwrapRunner, layout: Layout) -> None:
    inner = layout.outside / "inner"
    inner.mkdir()
    pol = policy(layout.ws, roots=(layout.ws, inner), read_only=(layout.outside,))
    script = f"echo x > {inner}/ok || exit 10; echo x > {layout.outside}/no && exit 11; exit 0"
    result = sh(runner, script, pol)
    assert result.returncode == 0, result.err
    assert (inner / "ok").exists() and not (layout.outside / "no").exists()


def test_tmp_is_read_only_unless_a_root(runner: BwrapRunner, layout: Layout) -> None:
    name = f"/tmp/dsh-bwrap-{uuid.uuid4().hex}"
    try:
        denied = sh(runner, f"echo x > {name}", policy(layout.ws))
        assert denied.returncode != 0 and not os.path.exists(name)
        allowed = sh(runner, f"echo x > {name}", policy(layout.ws, roots=(layout.ws, Path("/tmp"))))
        assert allowed.returncode == 0, allowed.err
        assert os.path.exists(name)
    finally:
        if os.path.exists(name):
            os.unlink(name)


def test_danger_full_access_is_not_wrapped(runner: BwrapRunner, layout: Layout) -> None:
    pol = policy(layout.ws, SandboxMode.DANGER_FULL_ACCESS)
    launch = runner.prepare(["echo", "hi"], pol, cwd=str(layout.ws), env={})
    assert isinstance(launch, LocalLaunch)
    assert launch.argv == ("echo", "hi")
    assert runner.enforcement(pol).level == "full"
    assert run(runner, ["echo", "hi"], pol).out == "hi\n"


def test_bwrap_setup_failure_is_a_nonzero_exit(runner: BwrapRunner, layout: Layout) -> None:
    """A cwd that does not exist: bwrap refuses and the command never runs."""
    marker = layout.ws / "ran"
    result = run(runner, ["touch", str(marker)], policy(layout.ws), cwd=layout.ws / "missing")
    assert result.returncode != 0
    assert "bwrap" in result.err
    assert not marker.exists()


def test_death_by_signal_is_a_declared_reporting_gap(runner: BwrapRunner, layout: Layout) -> None:
    result = sh(runner, "kill -KILL $$", policy(layout.ws))
    assert result.returncode == 128 + 9
    assert "signal-status" in runner.reporting_gaps(policy(layout.ws))
    assert runner.reporting_gaps(policy(layout.ws, SandboxMode.DANGER_FULL_ACCESS)) == {}


def test_baseline_is_the_same_bwrap_argv_spawned_bare_and_reusable(runner: BwrapRunner, layout: Layout) -> None:
    baseline = runner.baseline(policy(layout.ws), str(layout.ws))
    assert baseline.label == "bare bwrap true" and not baseline.slow
    try:
        baseline.run()
        baseline.run()  # the seccomp fd is rewound between spawns
    finally:
        if baseline.close is not None:
            baseline.close()
