"""Context, services and compositions."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
from dsh.executors.process import LocalSubprocessService
from dsh.executors.seam import ShellExecutor
from dsh.executors.shell_env import ShellEnvRegistry
from dsh.sandbox.context import (
    Context,
    Service,
    build_config,
    build_context,
    load_composition_file,
    parse_composition,
    plugin_names,
)
from dsh.sandbox.errors import CompositionError, DuplicateServiceError, MissingServiceError
from dsh.tools.jobs import JobRegistry

from tests.support.wait import wait_until


class Greeter(Service):
    key: ClassVar[str] = "greeter"

    @dataclasses.dataclass(frozen=True)
    class Config:
        name: str = "world"
        times: int = 1
        tags: tuple[str, ...] = ()
        loud: bool | None = None

    closed = 0

    def close(self) -> None:
        type(self).closed += 1


class OtherGreeter(Greeter):
    pass


def test_duplicate_service_names_both_providers() -> None:
    ctx = Context()
    ctx.provide(Greeter(ctx), origin="first")
    with pytest.raises(DuplicateServiceError) as err:
        ctx.provide(OtherGreeter(ctx), origin="second")
    assert err.value.code == "DUPLICATE_SERVICE"
    assert "'first'" in str(err.value) and "'second'" in str(err.value)
    assert "ctx.greeter" in str(err.value)


def test_typed_lookup_and_missing_service() -> None:
    ctx = Context()
    g = ctx.provide(Greeter(ctx))
    assert ctx.require(Greeter) is g and ctx.get(Greeter) is g and ctx.has(Greeter)
    assert ctx.get(JobRegistry) is None and not ctx.has(JobRegistry)
    with pytest.raises(MissingServiceError) as err:
        ctx.require(JobRegistry)
    assert err.value.code == "MISSING_SERVICE"
    assert "ctx.jobs" in str(err.value) and "JobRegistry" in str(err.value)


def test_close_tears_down_once_in_reverse() -> None:
    order: list[str] = []

    class A(Service):
        key: ClassVar[str] = "a"

        def close(self) -> None:
            order.append("a")

    class B(Service):
        key: ClassVar[str] = "b"

        def close(self) -> None:
            order.append("b")

    ctx = Context()
    ctx.provide(A(ctx))
    ctx.provide(B(ctx))
    ctx.close()
    ctx.close()
    assert order == ["b", "a"]


def test_config_validation_names_entry_and_field() -> None:
    cfg = build_config(Greeter.Config, {"name": "x", "times": 2, "tags": ["a"]}, entry="g1", provider="greeter")
    assert cfg == Greeter.Config(name="x", times=2, tags=("a",))
    with pytest.raises(CompositionError) as err:
        build_config(Greeter.Config, {"nmae": "x"}, entry="g1", provider="greeter")
    assert "'g1'" in str(err.value) and "'nmae'" in str(err.value) and "name" in str(err.value)
    with pytest.raises(CompositionError) as err:
        build_config(Greeter.Config, {"times": "3"}, entry="g1", provider="greeter")
    assert "'times'" in str(err.value) and "int" in str(err.value)
    with pytest.raises(CompositionError):
        build_config(Greeter.Config, {"times": True}, entry="g1", provider="greeter")  # bool is not an int here
    with pytest.raises(CompositionError):
        build_config(Greeter.Config, {"tags": "abc"}, entry="g1", provider="greeter")


def test_parse_composition_rejects_bad_shapes() -> None:
    assert parse_composition([{"name": "bash-local"}])[0].id == "bash-local"
    with pytest.raises(CompositionError, match="list"):
        parse_composition({"id": "x"})
    with pytest.raises(CompositionError, match="'name'"):
        parse_composition([{"id": "x"}])
    with pytest.raises(CompositionError, match="duplicate id"):
        parse_composition([{"id": "x", "name": "a"}, {"id": "x", "name": "b"}])
    with pytest.raises(CompositionError, match="unknown key"):
        parse_composition([{"id": "x", "name": "a", "conf": {}}])


def test_unknown_provider_names_the_entry() -> None:
    with pytest.raises(CompositionError) as err:
        build_context([{"id": "shell", "name": "bash-locl"}])
    assert "'shell'" in str(err.value) and "bash-locl" in str(err.value)
    assert "bash-local" in str(err.value)  # the known names are listed


def test_builtin_providers_are_registered_by_name() -> None:
    names = plugin_names()
    for name in ("subprocess-local", "shell-env", "bash-local", "pwsh-local", "bash-sandbox",
                 "sandbox", "sandbox-policy", "approval-deny", "jobs"):
        assert name in names


def test_bad_config_field_in_composition_file(tmp_path: Path) -> None:
    comp = tmp_path / "c.yaml"
    comp.write_text(textwrap.dedent("""\
        - id: shell
          name: bash-local
          config:
            timeout: 5
        """))
    with pytest.raises(CompositionError) as err:
        build_context(comp)
    assert "'shell'" in str(err.value) and "'timeout'" in str(err.value)
    assert "timeout_ms" in str(err.value)


def test_yaml_and_toml_compositions_build(tmp_path: Path) -> None:
    yml = tmp_path / "c.yaml"
    yml.write_text(f"- id: bash\n  name: bash-local\n  config:\n    cwd: {tmp_path}\n")
    toml = tmp_path / "c.toml"
    toml.write_text(f'[[plugins]]\nid = "bash"\nname = "bash-local"\nconfig = {{ cwd = "{tmp_path}" }}\n')
    for path in (yml, toml):
        assert [e.name for e in load_composition_file(path)] == ["bash-local"]
        with build_context(path) as ctx:
            assert ctx.has(ShellExecutor) and ctx.has(LocalSubprocessService) and ctx.has(ShellEnvRegistry)


def test_unreadable_or_invalid_composition(tmp_path: Path) -> None:
    with pytest.raises(CompositionError, match="cannot read"):
        load_composition_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[plugins]\n")
    with pytest.raises(CompositionError, match="not valid"):
        load_composition_file(bad)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_context_teardown_kills_and_waits_for_every_process(tmp_path: Path) -> None:
    from dsh.executors.seam import ShellExecRequest

    ctx = build_context([{"id": "bash", "name": "bash-local", "config": {"cwd": str(tmp_path)}}])
    pidfile = tmp_path / "pids"
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(
        command=f"sleep 300 & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait",
        on_expiry="none",
    ))
    execution = ctx.require(ShellExecutor).execute(spec)
    wait_until(lambda: pidfile.exists() and len(pidfile.read_text().split()) >= 2, "both pids")
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(_alive(p) for p in pids)
    ctx.close()
    assert execution.wait(0), "teardown returned before the execution settled"
    assert not any(_alive(p) for p in pids)
    assert os.getpid() > 0
