"""Availability, configuration, reports, teardown and a sandbox that dies."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from dsh.runners.e2b import E2BRunner
from dsh.runners.e2b.session import unavailable
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.runner import ExitStatus

from tests.runners.e2b.conftest import Envd, need_sdk
from tests.runners.e2b.helpers import policy, run, start
from tests.support.require import load_runner_class, require_runner
from tests.support.wait import PATIENCE_S, wait_until


def test_entry_point_loads_the_runner() -> None:
    assert load_runner_class("e2b") is E2BRunner


def test_no_key_and_no_url_is_unavailable(monkeypatch: pytest.MonkeyPatch,
                                          workspace: Path) -> None:
    need_sdk()
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    runner = E2BRunner()
    probe = runner.probe()
    assert not probe.available
    assert probe.reason is not None and probe.reason.startswith("E2B_API_KEY not set")
    with pytest.raises(SandboxUnavailable, match="SANDBOX_UNAVAILABLE: e2b: E2B_API_KEY not set"):
        runner.prepare(["true"], policy("read-only", workspace), cwd=str(workspace), env={})


def test_key_from_environment_makes_it_available(monkeypatch: pytest.MonkeyPatch) -> None:
    need_sdk()
    monkeypatch.setenv("E2B_API_KEY", "e2b_test_not_a_real_key")
    probe = E2BRunner().probe()
    assert probe.available and probe.version and probe.version.startswith("e2b ")


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch, workspace: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "e2b", None)  # `import e2b` now raises ImportError
    runner = E2BRunner({"sandbox_url": "http://127.0.0.1:9"})
    assert not runner.probe().available
    with pytest.raises(SandboxUnavailable, match=r"pip install 'dsh-sandbox\[e2b\]'"):
        runner.prepare(["true"], policy("read-only", workspace), cwd=str(workspace), env={})


def test_unreachable_debug_url_is_unavailable(tmp_path: Path) -> None:
    need_sdk()
    from tests.runners.e2b.envd_server import start_envd_server

    url, stop = start_envd_server(tmp_path)
    stop()  # nothing listens there any more
    probe = E2BRunner({"sandbox_url": url}).probe()
    assert not probe.available and "no envd answers" in (probe.reason or "")


def test_require_runner_accepts_the_debug_runner(runner: E2BRunner) -> None:
    probe = require_runner("e2b", runner)
    assert probe.available and probe.details["mode"] == "debug"


@pytest.mark.parametrize(("options", "field"), [
    ({"user": "root"}, "user"),
    ({"user": "user"}, "user"),
    ({"user": "Bad Name"}, "user"),
    ({"debug": True}, "sandbox_url"),
    ({"debug": "yes", "sandbox_url": "http://127.0.0.1:1"}, "debug"),
    ({"sandbox_url": "ftp://x"}, "sandbox_url"),
    ({"timeout": -5}, "timeout"),
    ({"template": ""}, "template"),
    ({"tempalte": "base"}, "tempalte"),
])
def test_bad_options_name_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        E2BRunner(options)


def test_bad_api_key_is_a_clear_unavailable() -> None:
    """The SDK raises AuthenticationException for a rejected key (HTTP 401)."""
    need_sdk()
    import e2b

    mapped = unavailable(e2b.AuthenticationException("Invalid API key"), "creating the sandbox")
    assert isinstance(mapped, SandboxUnavailable)
    assert "E2B rejected the API key" in mapped.reason and "E2B_API_KEY" in mapped.reason


def test_setup_refuses_a_user_with_sudo(tmp_path: Path, workspace: Path) -> None:
    need_sdk()
    from tests.runners.e2b.envd_server import start_envd_server

    root = tmp_path / "root"
    root.mkdir()
    url, stop = start_envd_server(root, sudoers=("user", "dsh"))  # a template granting sudo
    runner = E2BRunner({"sandbox_url": url})
    try:
        with pytest.raises(SandboxUnavailable, match="has no sudo"):
            run(runner, ["true"], policy("workspace-write", workspace))
    finally:
        runner.close()
        stop()


def test_enforcement_and_explain(envd: Envd, workspace: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    debug = E2BRunner({"sandbox_url": envd.url})
    ro = policy("read-only", workspace)
    report = debug.enforcement(ro)
    assert report.level == "partial" and report.degradations == ("e2b-debug",)
    assert any("allow_internet_access" in m for m in report.missing)
    assert len(report.reasons_for("e2b-debug")) == 2
    assert debug.enforcement(policy("danger-full-access", workspace, network=True)).level == "full"
    monkeypatch.setenv("E2B_API_KEY", "e2b_test_not_a_real_key")
    live = E2BRunner()
    assert live.enforcement(ro).level == "full"
    plan = live.explain(policy("workspace-write", workspace))
    assert plan.network.startswith("off")
    assert any("protected paths are never written back" in r for r in plan.rules)
    assert any("as dsh via setsid /bin/sh -c" in r for r in plan.rules)


def test_network_on_sandbox_refuses_network_off_commands(runner: E2BRunner,
                                                         workspace: Path) -> None:
    assert run(runner, ["true"], policy("danger-full-access", workspace, network=True)).status \
        == ExitStatus(0)
    with pytest.raises(SandboxUnavailable, match="network off"):
        run(runner, ["true"], policy("read-only", workspace))


def test_close_kills_running_commands(envd: Envd, workspace: Path) -> None:
    runner = E2BRunner({"sandbox_url": envd.url})
    proc, out = start(runner, ["sh", "-c", "echo x > late.txt; echo up; sleep 300"],
                      policy("workspace-write", workspace))
    wait_until(lambda: out.stdout_so_far() == b"up\n", "the command to start")
    runner.close()
    assert proc.wait(PATIENCE_S) == ExitStatus(None, signal.SIGKILL)
    assert not (workspace / "late.txt").exists()  # killed by teardown: not synced back
    with pytest.raises(SandboxUnavailable, match="closed"):
        run(runner, ["true"], policy("read-only", workspace))


def test_sandbox_dying_mid_command(envd: Envd, runner: E2BRunner, workspace: Path) -> None:
    proc, out = start(runner, ["sh", "-c", "echo up; sleep 300"],
                      policy("workspace-write", workspace))
    wait_until(lambda: out.stdout_so_far() == b"up\n", "the command to start")
    envd.stop()
    status = proc.wait(PATIENCE_S)
    assert status is not None and status.exit_code is None
    ran = out.finish()
    assert b"dsh: e2b:" in ran.stderr and b"mid-command" in ran.stderr
    with pytest.raises(SandboxUnavailable):  # the next command needs a new sandbox: none
        run(runner, ["true"], policy("workspace-write", workspace))


def test_expired_sandbox_is_replaced_before_the_next_command(
        envd: Envd, runner: E2BRunner, workspace: Path) -> None:
    from tests.runners.e2b.envd_server import envd_double

    (workspace / "a.txt").write_text("host")
    pol = policy("workspace-write", workspace)
    assert run(runner, ["sh", "-c", "echo remote-only > /tmp/scratch.txt"], pol).status \
        == ExitStatus(0)
    first = runner._session
    envd_double(envd.url).expire()  # E2B killed it (its lifetime ran out)
    ran = run(runner, ["sh", "-c", "cat a.txt; test -e /tmp/scratch.txt || echo fresh"], pol)
    assert ran.status == ExitStatus(0)
    assert ran.stdout == b"hostfresh\n"  # a new sandbox, with the workspace synced in
    assert runner._session is not first and first is not None and first.dead


def test_runner_scripts_that_time_out_are_unavailable(runner: E2BRunner, workspace: Path) -> None:
    """Both SDK timeout shapes (envd's exit -1 "signal: killed" through
    CommandExitException, or TimeoutException) become SandboxUnavailable."""
    assert run(runner, ["true"], policy("read-only", workspace)).status == ExitStatus(0)
    session = runner._session
    assert session is not None
    with pytest.raises(SandboxUnavailable, match="slow step: timed out"):
        session.run_internal("sleep 30", what="slow step", timeout=1)
    with pytest.raises(SandboxUnavailable, match=r"failing step: exited 3: why"):
        session.run_internal("echo why >&2; exit 3", what="failing step")


def test_a_reused_debug_envd_gets_a_clean_workspace(envd: Envd, workspace: Path) -> None:
    """Each runner is a new session; against the same envd (as conformance does)
    the users exist already and the old copy of the workspace is replaced."""
    pol = policy("workspace-write", workspace)
    first = E2BRunner({"sandbox_url": envd.url})
    try:
        run(first, ["sh", "-c", "echo x > made.txt"], pol)
    finally:
        first.close()
    (workspace / "made.txt").unlink()
    second = E2BRunner({"sandbox_url": envd.url})
    try:
        ran = run(second, ["sh", "-c", "ls"], pol)
        assert ran.status == ExitStatus(0) and ran.stdout == b""
    finally:
        second.close()


def test_workspace_must_not_change_within_a_session(runner: E2BRunner, workspace: Path,
                                                    tmp_path: Path) -> None:
    assert run(runner, ["true"], policy("read-only", workspace)).status == ExitStatus(0)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(SandboxUnavailable, match="one runner per workspace"):
        run(runner, ["true"], policy("read-only", other))
