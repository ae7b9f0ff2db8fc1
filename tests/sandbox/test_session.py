"""build_session: one frozen SessionSpec in, a Context out, for every caller."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from dsh.cli.options import keep_spill_files
from dsh.cli.run import RunOptions
from dsh.cli.run import open_run_session as run_context
from dsh.cli.tool import build_tool_context
from dsh.executors.local import LocalBashExecutor
from dsh.executors.process import LocalSubprocessService
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.executors.shell_env import ShellEnvRegistry
from dsh.sandbox.context import (
    CompositionEntry,
    Context,
    Planned,
    Service,
    build_context,
    load_plugin,
    mount_all,
    plugin_names,
)
from dsh.sandbox.errors import CompositionError, ConfigError, MissingServiceError
from dsh.sandbox.host import SandboxHost
from dsh.sandbox.session import SessionSpec, build_session


def shape(ctx: Context) -> dict[str, tuple[type[Service], Any]]:
    """What makes two contexts the same: each key's provider class and config."""
    return {key: (type(service), service.config) for key, service in ctx.services().items()}


def entries_of(spec: SessionSpec) -> list[dict[str, Any]]:
    return [{"id": e.id, "name": e.name, "config": dict(e.config)} for e in spec.entries()]


# -- equal inputs, equal contexts ------------------------------------------------------------
def test_run_command_builds_the_session_its_options_describe(workspace: Path) -> None:
    opts = RunOptions(mode="read-only", workspace=str(workspace), runner="bwrap", argv=("true",))
    spec = SessionSpec(
        mode="read-only", workspace=str(workspace), runner="bwrap", executor="bash-sandbox",
        executor_config={"max_timeout_ms": 24 * 3600 * 1000, "max_output_bytes": 4 * 1024 * 1024},
        services=(CompositionEntry("subprocess", "subprocess-local", {"keep_spill_files": True}),),
        keep_warm_s=600.0,  # the CLI keeps a container-like sandbox for its next run
    )
    with run_context(opts) as from_cli, build_session(spec) as direct:
        assert shape(from_cli) == shape(direct)
        assert from_cli.require(SandboxHost).config.runner == "bwrap"


def test_tool_command_and_its_composition_file_build_equal_contexts(workspace: Path, trusted_dir: Path) -> None:
    comp = trusted_dir / "session.yaml"  # outside every writable root, or it is refused
    with build_tool_context(composition=None, shell="bash", mode="read-only", workspace=str(workspace),
                            runner="auto", approval=None, profile=None) as from_flags:
        # The CLI keeps the spill files its results name; the file says so too.
        spec = SessionSpec(mode="read-only", workspace=str(workspace), executor="bash-sandbox", approval="deny",
                           services=(keep_spill_files(),))
        comp.write_text(yaml.safe_dump(entries_of(spec)))
        with build_tool_context(composition=str(comp), shell="bash", mode=None, workspace=None,
                                runner=None, approval=None, profile=None) as from_file:
            assert shape(from_flags) == shape(from_file)
            assert len(shape(from_file)) == 6  # policy, host, shell, approval + 2 required


def test_equal_specs_build_equal_contexts(workspace: Path) -> None:
    spec = SessionSpec(mode="workspace-write", workspace=str(workspace), executor="bash-sandbox",
                       approval="prompt", runner_options={"docker": {"image": "x:1"}})
    with build_session(spec) as first, build_session(spec) as second:
        assert shape(first) == shape(second)
    assert spec == dataclasses.replace(spec)  # a value: equal fields, equal specs


def test_providers_come_from_the_entry_points() -> None:
    from importlib import metadata

    declared = {ep.name: ep.value for ep in metadata.entry_points(group="dsh_sandbox.plugins")}
    assert sorted(declared) == plugin_names()
    for name, value in declared.items():
        module, _, attr = value.partition(":")
        assert load_plugin(name).__name__ == attr, name
        assert load_plugin(name).__module__ == module, name


def test_spec_is_frozen_and_copies_what_it_is_given(workspace: Path) -> None:
    options = {"docker": {"image": "a"}}
    spec = SessionSpec(workspace=str(workspace), runner_options=options)
    options["docker"]["image"] = "b"
    assert spec.runner_options["docker"]["image"] == "a"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.mode = "read-only"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.runner_options["docker"]["image"] = "c"  # type: ignore[index]


def test_composition_excludes_the_other_fields(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mode, runner cannot be set beside it"):
        build_session(SessionSpec(composition=str(tmp_path / "c.yaml"), mode="read-only", runner="bwrap"))
    with pytest.raises(ConfigError, match=r"mounts no policy.*mode cannot be set"):
        build_session(SessionSpec(sandboxed=False, executor="bash-local", mode="read-only"))


def test_bad_field_names_the_entry_and_field(workspace: Path) -> None:
    with pytest.raises(CompositionError, match=r"entry 'shell'.*'grace'"):
        build_session(SessionSpec(workspace=str(workspace), executor="bash-sandbox",
                                  executor_config={"grace": 1}))


def test_env_reaches_every_command_and_a_request_wins(tmp_path: Path) -> None:
    spec = SessionSpec(sandboxed=False, executor="bash-local", executor_config={"cwd": str(tmp_path)},
                       env={"H2_T_A": "session", "H2_T_B": "session"})
    with build_session(spec) as ctx:
        shell = ctx.require(ShellExecutor)
        request = ShellExecRequest(command='echo "$H2_T_A $H2_T_B"', env={"H2_T_B": "call"})
        assert shell.execute(shell.resolve(request)).result(timeout=60).stdout.text == "session call\n"


def test_sandboxed_executor_starts_in_the_policy_workspace(workspace: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = SessionSpec(mode="danger-full-access", workspace=str(workspace), executor="bash-sandbox")
    with build_session(spec) as ctx:
        assert ctx.require(ShellExecutor).resolve(ShellExecRequest(command="pwd")).workdir == str(workspace)


# -- dependency order -------------------------------------------------------------------------
BUILT: list[str] = []


class Store(Service):
    key: ClassVar[str] = "store"

    def __init__(self, ctx: Context, config: Any = None) -> None:
        super().__init__(ctx, config)
        BUILT.append("store")


class Cache(Service):
    key: ClassVar[str] = "cache"
    requires: ClassVar[tuple[type[Service], ...]] = (Store,)

    def __init__(self, ctx: Context, config: Any = None) -> None:
        super().__init__(ctx, config)
        self.store = ctx.require(Store)  # there already: mounted first
        BUILT.append("cache")


class Api(Service):
    key: ClassVar[str] = "api"
    requires: ClassVar[tuple[type[Service], ...]] = (Cache, Store)

    def __init__(self, ctx: Context, config: Any = None) -> None:
        super().__init__(ctx, config)
        BUILT.append("api")


def plan(*classes: type[Service]) -> list[Planned]:
    return [Planned(cls, cls.Config(), cls.key) for cls in classes]


def test_services_are_mounted_after_what_they_require() -> None:
    BUILT.clear()
    with mount_all(plan(Api, Cache, Store)) as ctx:
        assert BUILT == ["store", "cache", "api"]
        assert list(ctx.services()) == ["store", "cache", "api"]
        assert ctx.require(Cache).store is ctx.require(Store)


def test_a_missing_requirement_is_named_before_anything_is_built() -> None:
    BUILT.clear()
    with pytest.raises(CompositionError) as err:
        mount_all(plan(Api, Cache))
    assert "entry 'cache'" in str(err.value) and "ctx.store (Store)" in str(err.value)
    assert BUILT == []


def test_a_requirement_cycle_is_an_error() -> None:
    class Ping(Service):
        key: ClassVar[str] = "ping"

    class Pong(Service):
        key: ClassVar[str] = "pong"
        requires: ClassVar[tuple[type[Service], ...]] = (Ping,)

    Ping.requires = (Pong,)
    with pytest.raises(CompositionError, match=r"circular requirement: ping -> pong -> ping"):
        mount_all(plan(Ping, Pong))


def test_auto_mounted_requirements_need_no_entry(tmp_path: Path) -> None:
    with build_context([{"id": "shell", "name": "bash-local", "config": {"cwd": str(tmp_path)}}]) as ctx:
        assert list(ctx.services()) == ["subprocess", "shell_env", "shell"]
        assert isinstance(ctx.require(LocalSubprocessService), LocalSubprocessService)
    with build_context([{"name": "sandbox-policy", "config": {"workspace": str(tmp_path)}}]) as bare:
        assert not bare.has(LocalSubprocessService) and not bare.has(ShellEnvRegistry)


def test_a_sandboxed_executor_without_a_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CompositionError, match=r"requires ctx.sandbox_policy \(PolicyService\)"):
        build_context([{"id": "shell", "name": "bash-sandbox", "config": {"cwd": str(tmp_path)}}])


def test_a_provider_of_the_wrong_definition_is_refused(tmp_path: Path) -> None:
    class Impostor(Service):
        key: ClassVar[str] = "subprocess"

    with pytest.raises(CompositionError, match=r"entry 'shell'.*LocalSubprocessService.*Impostor"):
        mount_all([Planned(Impostor, Impostor.Config(), "impostor"),
                   Planned(LocalBashExecutor, LocalBashExecutor.Config(cwd=str(tmp_path)), "shell")])
    ctx = Context()
    ctx.provide(Impostor(ctx), origin="impostor")
    with pytest.raises(MissingServiceError, match=r"'impostor' \(Impostor\), not a LocalSubprocessService"):
        ctx.require(LocalSubprocessService)
