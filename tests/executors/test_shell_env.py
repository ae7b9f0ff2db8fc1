"""ctx.require(ShellEnvRegistry): managed DSH_* facts that no caller can override."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.executors.shell_env import ShellEnvRegistry
from dsh.sandbox.context import Context, build_context
from dsh.sandbox.errors import UsageError

from tests.support.executors import make_context, run


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    context = make_context(tmp_path)
    yield context
    context.close()


def _child_env(ctx: Context, **request: object) -> dict[str, str]:
    result = run(ctx, "env", **request)
    return dict(line.split("=", 1) for line in result.stdout.text.splitlines() if "=" in line)


def test_dsh_home_from_env_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_HOME", "/opt/dsh-home")
    with build_context([{"name": "shell-env"}]) as context:
        assert context.require(ShellEnvRegistry).collect() == {"DSH_HOME": "/opt/dsh-home"}
    monkeypatch.delenv("DSH_HOME")
    with build_context([{"name": "shell-env"}]) as context:
        assert context.require(ShellEnvRegistry).collect() == {"DSH_HOME": os.path.expanduser("~/.dsh")}


def test_a_user_without_any_home_gets_no_dsh_home_and_a_clear_log_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare uid (no password entry) run with no HOME: no traceback; the
    shell is told no DSH_HOME, and the escalation log asks for one."""
    import dsh.sandbox.own_state as own_state
    from dsh.sandbox.approval import default_log_file
    from dsh.sandbox.errors import ConfigError

    for name in ("DSH_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(own_state, "_password_home", lambda: None)
    with build_context([{"name": "shell-env"}]) as context:
        assert "DSH_HOME" not in context.require(ShellEnvRegistry).collect()
    with pytest.raises(ConfigError, match="set DSH_HOME"):
        default_log_file()


def test_register_and_scoped_removal(ctx: Context) -> None:
    registry: ShellEnvRegistry = ctx.require(ShellEnvRegistry)
    handle = registry.register("DSH_AGENT", "agent-1")
    with registry.register("DSH_TURN", lambda: "7"):
        assert registry.collect()["DSH_TURN"] == "7"
        assert _child_env(ctx)["DSH_TURN"] == "7"
    assert "DSH_TURN" not in registry.collect()
    assert registry.collect()["DSH_AGENT"] == "agent-1"
    handle.remove()
    handle.remove()  # idempotent
    assert "DSH_AGENT" not in registry.collect()
    # A stale handle cannot remove a later registration of the same name.
    again = registry.register("DSH_AGENT", "agent-2")
    handle.remove()
    assert registry.collect()["DSH_AGENT"] == "agent-2"
    again.remove()


def test_callable_fact_is_evaluated_per_collect_and_none_omits(ctx: Context) -> None:
    values = iter(["1", None, "3"])
    with ctx.require(ShellEnvRegistry).register("DSH_COUNTER", lambda: next(values)):
        assert ctx.require(ShellEnvRegistry).collect()["DSH_COUNTER"] == "1"
        assert "DSH_COUNTER" not in ctx.require(ShellEnvRegistry).collect()
        assert ctx.require(ShellEnvRegistry).collect()["DSH_COUNTER"] == "3"


@pytest.mark.parametrize("name", ["HOME", "dsh_lower", "DSH_", "DSH_A-B", "XDSH_A"])
def test_names_must_start_with_dsh(ctx: Context, name: str) -> None:
    with pytest.raises(UsageError, match="DSH_"):
        ctx.require(ShellEnvRegistry).register(name, "x")


def test_duplicates_and_builtins_cannot_be_replaced(ctx: Context) -> None:
    with pytest.raises(UsageError, match="already registered"):
        ctx.require(ShellEnvRegistry).register("DSH_HOME", "/evil")
    with ctx.require(ShellEnvRegistry).register("DSH_X", "1"), pytest.raises(UsageError, match="already registered"):
        ctx.require(ShellEnvRegistry).register("DSH_X", "2")


def test_caller_env_never_overrides_a_managed_fact(ctx: Context) -> None:
    managed = ctx.require(ShellEnvRegistry).collect()["DSH_HOME"]
    with ctx.require(ShellEnvRegistry).register("DSH_SESSION", "s-1"):
        env = _child_env(
            ctx,
            env={"DSH_HOME": "/caller", "DSH_SESSION": "forged"},
            dsh_env={"DSH_HOME": "/caller-dsh", "DSH_SESSION": "forged-too"},
        )
    assert env["DSH_HOME"] == managed
    assert env["DSH_SESSION"] == "s-1"


def test_inherited_stale_dsh_vars_never_leak(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_STALE_FACT", "from-an-old-session")
    monkeypatch.setenv("DSH_HOME", "/stale")
    env = _child_env(ctx)
    assert "DSH_STALE_FACT" not in env
    assert env["DSH_HOME"] == ctx.require(ShellEnvRegistry).collect()["DSH_HOME"]
    assert {k for k in env if k.startswith("DSH_")} == set(ctx.require(ShellEnvRegistry).collect())
