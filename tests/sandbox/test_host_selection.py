"""Host selection, the fail-closed gate and plugins, tested with ``FakeRunner`` (no kernel needed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.runners.fake import FakeRunner
from dsh.sandbox import capability as cap
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.host import SandboxHost, SandboxHostConfig
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.registry import known_runner_names, runner_entry_points
from dsh.sandbox.runner import LocalLaunch, RemoteLaunch

from tests.support.plugins import install_plugin

WW = "workspace-write"
PROTECTED = ("fake-protected-paths", (cap.PROTECTED_PATHS,))


@pytest.fixture
def ctx() -> Iterator[Context]:
    with Context() as context:
        yield context


def policy(ctx: Context, workspace: Path, mode: str = WW, **kw: Any) -> SandboxPolicy:
    resolved = PolicyService(ctx, PolicyConfig(mode=mode, workspace=str(workspace))).resolve()
    return dataclasses.replace(resolved, **kw)


def host(ctx: Context, *runners: FakeRunner, runner: str = "auto") -> SandboxHost:
    return SandboxHost(ctx, SandboxHostConfig(runner=runner), runners=list(runners))


def partial(name: str, priority: int | None, *reasons: str, **kw: Any) -> FakeRunner:
    degradation, capabilities = PROTECTED
    return FakeRunner(name, auto_priority=priority, gaps={WW: [(degradation, r) for r in reasons]},
                      degradations={degradation: capabilities}, **kw)


def test_auto_picks_the_lowest_priority_that_enforces_fully(ctx: Context, workspace: Path) -> None:
    late, early = FakeRunner("late", auto_priority=20), FakeRunner("early", auto_priority=10)
    assert host(ctx, late, early).choose(policy(ctx, workspace)).runner is early


def test_auto_prefers_full_over_an_accepted_partial(ctx: Context, workspace: Path) -> None:
    first = partial("first", 10, "cannot protect .git")
    second = FakeRunner("second", auto_priority=20)
    p = policy(ctx, workspace, accept_degraded=("fake-protected-paths",))
    assert host(ctx, first, second).choose(p).runner is second
    # Alone, the accepted partial runner is chosen and says what it misses.
    selection = host(ctx, partial("only", 10, "cannot protect .git")).choose(p)
    assert selection.enforcement.degradations == ("fake-protected-paths",)


def test_unavailable_runners_are_skipped_with_their_reasons(ctx: Context, workspace: Path) -> None:
    off = FakeRunner("off", available=False, reason="kernel too old", auto_priority=1)
    on = FakeRunner("on", auto_priority=2)
    assert host(ctx, off, on).choose(policy(ctx, workspace)).runner is on
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, off).choose(policy(ctx, workspace))
    assert "off: not available: kernel too old" in str(info.value)


def test_fail_closed_when_no_runner_is_auto_selectable(ctx: Context, workspace: Path) -> None:
    # Never auto-selected: the fake's default, like every runner without a priority.
    never = FakeRunner("never")
    h = host(ctx, never)
    with pytest.raises(SandboxUnavailable, match="no runner can enforce"):
        h.prepare(("true",), policy(ctx, workspace), str(workspace), {})
    assert never.calls == []


def test_unaccepted_degradation_is_refused_named_and_acceptable(ctx: Context, workspace: Path) -> None:
    fake = partial("fake", 10, "cannot protect .git")
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, fake).prepare(("true",), policy(ctx, workspace), str(workspace), {})
    assert info.value.degradations == ("fake-protected-paths",)
    assert "--accept-degraded fake-protected-paths" in str(info.value)
    assert fake.calls == []
    p = policy(ctx, workspace, accept_degraded=("fake-protected-paths",))
    launch, runner, enforcement = host(ctx, fake).prepare(("true", "a b"), p, str(workspace), {})
    assert runner is fake and enforcement.level == "partial"
    assert isinstance(launch, RemoteLaunch) and fake.calls[0].argv == ("true", "a b")


def test_a_named_runner_goes_through_the_same_gate(ctx: Context, workspace: Path) -> None:
    fake = partial("fake", None, "cannot protect .git")
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, fake, runner="fake").choose(policy(ctx, workspace))
    assert info.value.runner == "fake" and info.value.degradations == ("fake-protected-paths",)


def test_a_path_that_changes_while_planned_is_a_clean_refusal(ctx: Context, workspace: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A concurrent rename can make the planner's own lstat or readlink fail
    (EINVAL from a link replaced by a directory): that is a retry, said so."""
    fake = FakeRunner("fake", auto_priority=1)

    def raced(_policy: SandboxPolicy) -> None:
        raise OSError(22, "Invalid argument", str(workspace / "P"))

    monkeypatch.setattr(fake, "enforcement", raced)
    with pytest.raises(SandboxUnavailable, match=r"/P changed while the sandbox was being planned "
                                                 r"\(Invalid argument\); nothing ran, retry"):
        host(ctx, fake, runner="fake").choose(policy(ctx, workspace))


def test_a_remote_runner_is_only_used_when_named(ctx: Context, workspace: Path) -> None:
    remote = FakeRunner("cloud", remote=True)
    with pytest.raises(SandboxUnavailable):
        host(ctx, remote).choose(policy(ctx, workspace))
    assert host(ctx, remote).choose(policy(ctx, workspace, allowed_runners=("cloud",))).runner is remote
    named = host(ctx, remote, runner="cloud")
    assert named.remote and named.choose(policy(ctx, workspace)).runner is remote
    assert not host(ctx, FakeRunner("local", auto_priority=1), runner="local").remote


def test_the_fake_never_runs_a_constrained_command_on_the_host(ctx: Context, workspace: Path) -> None:
    fake = FakeRunner("fake", auto_priority=1, on_run="host")
    with pytest.raises(SandboxUnavailable, match="enforces nothing"):
        fake.prepare(("true",), policy(ctx, workspace), cwd=str(workspace), env={})
    launch = fake.prepare(("true",), policy(ctx, workspace, mode="danger-full-access"), cwd=str(workspace), env={})
    assert isinstance(launch, LocalLaunch) and launch.argv == ("true",)


def test_an_injected_host_knows_only_its_runners(ctx: Context) -> None:
    with pytest.raises(ConfigError, match=r"unknown runner .landlock.; use one of: auto, fake"):
        host(ctx, FakeRunner("fake"), runner="landlock")


def test_the_fake_is_not_registered() -> None:
    assert "fake" not in runner_entry_points()
    assert all("fake" not in point.value for point in runner_entry_points().values())


def test_refusal_reads_in_five_seconds(ctx: Context, workspace: Path) -> None:
    (workspace / ".git").mkdir()
    reasons = [f"cannot keep {workspace}/{name} read-only inside writable root {workspace}: Landlock only grants access"
               for name in (".git", ".dsh", ".hg", ".svn", ".jj", ".bzr")]
    fake = partial("fake", 10, *reasons)
    off = FakeRunner("other", available=False, reason="bwrap not installed", auto_priority=20)
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, fake, off).choose(policy(ctx, workspace))
    text = str(info.value)
    lines = text.splitlines()
    assert len(lines) < 10, text
    assert text.count("Landlock only grants access") == 1, text
    assert f"{workspace}/.git" in text and "+3 more" in text, text  # the existing path is listed first
    assert "other: not available: bwrap not installed" in text
    assert lines[-1].startswith("to run on fake as it is: --runner fake --accept-degraded fake-protected-paths"), text
    assert len(set(lines)) == len(lines)


def test_a_refusal_suggests_one_runners_flags_and_pins_it(ctx: Context, workspace: Path) -> None:
    # Accepting every runner's degradations at once would let auto pick the
    # first one in its order (here the weaker, with more gaps): only the runner
    # that needs the least is suggested, with --runner so nothing else is chosen.
    _, capabilities = PROTECTED
    gaps = [(f"weak-gap-{i}", f"reason {i}") for i in range(3)]
    weak = FakeRunner("weak", auto_priority=10, gaps={WW: gaps}, degradations={g: capabilities for g, _ in gaps})
    strong = FakeRunner("strong", auto_priority=20, gaps={WW: [("strong-gap", "memory limit per process")]},
                        degradations={"strong-gap": capabilities})
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, weak, strong).choose(policy(ctx, workspace))
    hint = str(info.value).splitlines()[-1]
    assert hint.startswith("to run on strong as it is: --runner strong --accept-degraded strong-gap "), hint
    assert "weak" not in hint


@pytest.fixture
def plugin(tmp_path: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A third-party distribution that registers a runner through its entry point."""
    install_plugin(
        tmp_path, monkeypatch, "dsh_plugin_demo",
        "from dsh.runners.fake import FakeRunner\n"
        "class DemoRunner(FakeRunner):\n"
        "    name = 'demo'\n"
        "    auto_priority = 1\n"
        "    def __init__(self, options=None):\n"
        "        super().__init__('demo', auto_priority=1, options=options)\n",
        "[dsh_sandbox.runners]\ndemo = dsh_plugin_demo:DemoRunner\n",
        cache=trusted_dir / "cache",  # outside the writable /tmp
    )
    return "demo"


def test_a_third_party_plugin_is_found_through_its_entry_point(ctx: Context, workspace: Path, plugin: str) -> None:
    assert plugin in known_runner_names()
    h = SandboxHost(ctx, SandboxHostConfig(runner="auto"))
    selection = h.choose(policy(ctx, workspace))
    assert selection.runner.name == plugin  # its priority 1 comes before every built-in runner


def test_without_the_plugin_its_name_is_unknown(ctx: Context) -> None:
    assert "demo" not in known_runner_names()
    with pytest.raises(ConfigError, match="demo"):
        SandboxHost(ctx, SandboxHostConfig(runner="demo"))


def test_a_stale_priority_hint_cannot_make_auto_pick_a_runner_never_auto(
    ctx: Context, workspace: Path, plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh.sandbox import registry

    points = runner_entry_points()
    # An edited hint claims the plugin is never auto and e2b (remote) comes first.
    registry.write_priorities(points, {**dict.fromkeys(points), "e2b": 0, plugin: None})
    h = SandboxHost(ctx, SandboxHostConfig(runner="auto"))
    with pytest.raises(SandboxUnavailable) as info:  # nothing left to try: fail closed
        h.choose(policy(ctx, workspace))
    assert "e2b" not in str(info.value) and h._runners == {}  # e2b was never even instantiated
    assert registry.read_priorities(points) is not None  # the hint spared the imports
