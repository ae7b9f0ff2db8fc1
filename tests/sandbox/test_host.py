"""SandboxHost: runner loading, selection (auto / named / allowed), fail-closed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.host import SandboxHost, SandboxHostConfig
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.registry import known_runner_names
from dsh.sandbox.runner import LocalLaunch

from tests.support.sandboxed import LANDLOCK_DEGRADED, need_runner


@pytest.fixture
def ctx() -> Iterator[Context]:
    with Context() as context:
        yield context


def policy(ctx: Context, workspace: Path, mode: str = "workspace-write", **kw: Any) -> SandboxPolicy:
    resolved = PolicyService(ctx, PolicyConfig(mode=mode, workspace=str(workspace))).resolve()
    return dataclasses.replace(resolved, **kw)


def host(ctx: Context, runner: str = "auto", **options: Any) -> SandboxHost:
    return SandboxHost(ctx, SandboxHostConfig(runner=runner, options=options))


def test_unknown_runner_lists_known_ones(ctx: Context) -> None:
    with pytest.raises(ConfigError) as info:
        host(ctx, "chroot")
    assert "chroot" in str(info.value)
    for name in ("auto", *known_runner_names()):
        assert name in str(info.value)
    with pytest.raises(ConfigError, match="options"):
        host(ctx, "auto", chroot={})


@pytest.mark.parametrize("value", [-1, 0, float("nan"), float("inf"), 86401, True, "600"])
def test_a_bad_keep_warm_is_refused_naming_the_field(ctx: Context, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        SandboxHost(ctx, SandboxHostConfig(keep_warm_s=value))
    assert "keep_warm_s" in str(info.value) and "null" in str(info.value)


def test_keep_warm_reaches_every_runner_the_host_makes(ctx: Context) -> None:
    kept = SandboxHost(ctx, SandboxHostConfig(keep_warm_s=30))
    for name in ("bwrap", "landlock", "docker"):
        runner = kept.runner(name)
        assert runner is not None and runner.keep_warm_s == 30
    plain = SandboxHost(ctx, SandboxHostConfig())
    runner = plain.runner("docker")
    assert runner is not None and runner.keep_warm_s is None


def test_one_instance_per_runner_and_close(ctx: Context) -> None:
    need_runner("landlock")
    h = host(ctx)
    first = h.runner("landlock")
    assert first is not None and h.runner("landlock") is first
    h.close()
    h.close()  # idempotent
    with pytest.raises(SandboxUnavailable):
        h.runner("landlock")


def test_probe_all_names_every_runner(ctx: Context) -> None:
    probes = {p.name: p for p in host(ctx).probe_all()}
    assert set(known_runner_names()) <= set(probes)
    for probe in probes.values():
        assert probe.available or probe.reason


def test_auto_prefers_full_enforcement(ctx: Context, workspace: Path) -> None:
    need_runner("landlock")
    need_runner("bwrap")
    h = host(ctx)
    # read-only: Landlock comes first but is partial (the host's process list
    # stays visible); bwrap is full and wins
    read_only = h.choose(policy(ctx, workspace, "read-only"))
    assert read_only.runner.name == "bwrap" and read_only.enforcement.level == "full"
    # workspace-write: Landlock is partial (.git, .dsh); bwrap is full and wins
    choice = h.choose(policy(ctx, workspace))
    assert choice.runner.name == "bwrap" and choice.enforcement.level == "full"
    # even when Landlock's degradations are accepted, full enforcement is preferred
    accepted = policy(ctx, workspace, accept_degraded=(*LANDLOCK_DEGRADED,))
    assert h.select(accepted).name == "bwrap"


def test_auto_falls_back_to_accepted_partial(ctx: Context, workspace: Path) -> None:
    need_runner("landlock")
    h = host(ctx)
    only = policy(ctx, workspace, allowed_runners=("landlock",), accept_degraded=(*LANDLOCK_DEGRADED,))
    choice = h.choose(only)
    assert choice.runner.name == "landlock" and choice.enforcement.level == "partial"
    refused = policy(ctx, workspace, allowed_runners=("landlock",))
    with pytest.raises(SandboxUnavailable) as info:
        h.choose(refused)
    assert "landlock:" in info.value.reason and "accept_degraded" in info.value.reason


def test_auto_names_every_runner_it_rejected(ctx: Context, workspace: Path) -> None:
    h = host(ctx)
    with pytest.raises(SandboxUnavailable) as info:
        h.choose(policy(ctx, workspace, allowed_runners=("seatbelt",)))
    assert "seatbelt:" in info.value.reason
    with pytest.raises(SandboxUnavailable) as info:
        h.choose(policy(ctx, workspace, allowed_runners=("nonesuch",)))
    assert "nonesuch" in info.value.reason


def test_auto_uses_docker_only_when_the_profile_names_it(ctx: Context, workspace: Path) -> None:
    need_runner("docker")
    h = host(ctx)
    assert h.select(policy(ctx, workspace, "read-only")).name != "docker"
    assert h.select(policy(ctx, workspace, "read-only", allowed_runners=("docker",))).name == "docker"


def test_named_runner_must_be_available_and_allowed(ctx: Context, workspace: Path) -> None:
    need_runner("bwrap")
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, "seatbelt").select(policy(ctx, workspace))
    assert info.value.runner == "seatbelt" and info.value.reason
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, "bwrap").select(policy(ctx, workspace, allowed_runners=("landlock",)))
    assert "allows only landlock" in info.value.reason


def test_named_runner_refusing_the_policy(ctx: Context, workspace: Path) -> None:
    need_runner("landlock")
    with pytest.raises(SandboxUnavailable) as info:
        host(ctx, "landlock").select(policy(ctx, workspace))
    assert "landlock-protected-paths" in info.value.reason


def test_prepare_hands_the_exact_argv(ctx: Context, workspace: Path) -> None:
    need_runner("bwrap")
    argv = ("printf", "%s", "a b", "", b"\xff")
    launch, runner, enforcement = host(ctx, "bwrap").prepare(
        argv, policy(ctx, workspace, "read-only"), str(workspace), {}
    )
    try:
        assert runner.name == "bwrap" and enforcement.level == "full"
        assert isinstance(launch, LocalLaunch)
        assert launch.argv[-len(argv):] == argv
    finally:
        if launch.cleanup is not None:
            launch.cleanup()


def test_danger_needs_no_runner_under_auto(ctx: Context, workspace: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="unwrapped"):
        host(ctx).prepare(("true",), policy(ctx, workspace, "danger-full-access"), "/", {})
