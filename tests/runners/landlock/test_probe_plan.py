"""Probe, unavailability reasons, explain() and the seccomp program."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner, abi
from dsh.runners.landlock.abi import interpret_abi_errno
from dsh.runners.landlock.rules import DEGRADE_METADATA, DEGRADE_SCOPES, DEGRADE_TRUNCATE, plan_rules
from dsh.runners.linux import seccomp, syscalls
from dsh.sandbox.errors import ConfigError, SandboxUnavailable, UsageError
from dsh.sandbox.policy import ResourceLimits

from tests.runners.landlock.helpers import RO, WW, make_policy

Layout = tuple[Path, Path]


def test_probe_reports_the_abi_and_is_cached(runner: LandlockRunner) -> None:
    probe = runner.probe()
    assert probe.available and probe.version == f"landlock ABI {probe.details['abi']}"
    assert probe.details["abi"] == abi.abi_version()
    assert runner.probe() is probe


@pytest.mark.parametrize(
    ("err", "kernel", "filtered", "expected"),
    [
        (errno.EOPNOTSUPP, (6, 8), False, "lsm=landlock"),
        (errno.ENOSYS, (5, 10), False, "too old"),
        (errno.ENOSYS, (6, 8), True, "seccomp profile"),
        (errno.ENOSYS, (6, 8), False, "CONFIG_SECURITY_LANDLOCK"),
        (errno.EPERM, (6, 8), True, "seccomp profile"),
    ],
)
def test_unavailability_reasons(err: int, kernel: tuple[int, int], filtered: bool, expected: str) -> None:
    assert expected in interpret_abi_errno(err, kernel=kernel, seccomp_active=filtered)


def test_probe_unavailable_names_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> int:
        raise abi.LandlockError(errno.EOPNOTSUPP, "disabled")

    monkeypatch.setattr(abi, "abi_version", fail)
    runner = LandlockRunner()
    probe = runner.probe()
    assert not probe.available and "lsm=landlock" in (probe.reason or "")
    with pytest.raises(SandboxUnavailable, match="lsm=landlock") as info:
        runner.prepare(["true"], make_policy(RO, Path("/")), cwd="/", env={})
    assert info.value.code == "SANDBOX_UNAVAILABLE"


def test_unsupported_arch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syscalls.platform, "machine", lambda: "riscv64")
    with pytest.raises(seccomp.UnsupportedArch):
        seccomp.native_arch()
    probe = LandlockRunner().probe()
    assert not probe.available and "riscv64" in (probe.reason or "")


def test_older_abis_drop_rights_and_report_gaps(layout: Layout) -> None:
    policy = make_policy(WW, layout[0])
    old = plan_rules(policy, 1)
    assert old.handled_net == 0 and old.scoped == 0
    assert not old.handled_fs & abi.FS_RIGHTS["REFER"][0]
    assert any(d.startswith("TRUNCATE") for d in old.dropped)
    assert {g.degradation for g in old.gaps} == {DEGRADE_SCOPES, DEGRADE_TRUNCATE, DEGRADE_METADATA}
    current = plan_rules(policy, 7)
    assert [g.degradation for g in current.gaps] == [DEGRADE_METADATA] and current.dropped == ()
    assert current.handled_fs == sum(bit for bit, _ in abi.FS_RIGHTS.values())


def test_explain_lists_rules_network_limits_and_gaps(runner: LandlockRunner, layout: Layout) -> None:
    ws, _ = layout
    policy = make_policy(WW, ws, protected_paths=(ws / ".git",), limits=ResourceLimits(max_file_size_bytes=1024))
    plan = runner.explain(policy)
    assert plan.runner == "landlock" and plan.mode is WW
    assert "/ -> EXECUTE|READ_FILE|READ_DIR" in plan.rules
    assert any(r.startswith(f"{ws} -> ") and "WRITE_FILE" in r for r in plan.rules)
    assert any(r.startswith("/dev/null -> WRITE_FILE|READ_FILE") for r in plan.rules)
    assert plan.network.startswith("off:") and "scoped" in plan.network
    assert any("RLIMIT_FSIZE" in line for line in plan.limits)
    assert any(f"cannot keep {ws / '.git'} read-only" in c for c in plan.cannot)


def test_bad_option_and_bad_argv_are_usage_errors(runner: LandlockRunner, layout: Layout) -> None:
    with pytest.raises(ConfigError, match="protected_paths"):
        LandlockRunner({"protected_paths": "bogus"})
    with pytest.raises(UsageError, match="argv"):
        runner.prepare([], make_policy(RO, layout[0]), cwd="/", env={})
    with pytest.raises(UsageError, match="argv"):
        runner.prepare(["echo", 3], make_policy(RO, layout[0]), cwd="/", env={})  # type: ignore[list-item]


def test_closed_runner_refuses(layout: Layout) -> None:
    runner = LandlockRunner()
    runner.close()
    with pytest.raises(SandboxUnavailable):
        runner.prepare(["true"], make_policy(RO, layout[0]), cwd="/", env={})
