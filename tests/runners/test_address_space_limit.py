"""A memory limit applied as RLIMIT_AS is work the runner refuses (Node, Go and the
JVM reserve more address space than they use): declared as a limitation exactly
when the runner's own plan says RLIMIT_AS."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from dsh.sandbox.capability import ADDRESS_SPACE
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy

from tests.support.require import load_runner_class, require_runner

ADDRESS_SPACE_LIMIT = ADDRESS_SPACE.name


@pytest.mark.parametrize("name", ["landlock", "bwrap"])
def test_declared_exactly_when_the_limit_is_per_process(workspace: Path, name: str) -> None:
    runner = load_runner_class(name)()
    require_runner(name, runner)
    try:
        limited = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=workspace, writable_roots=(workspace,),
                                limits=ResourceLimits(max_memory_bytes=512 << 20))
        per_process = any("RLIMIT_AS" in line for line in runner.explain(limited).limits)
        declared = runner.limitations(limited)
        assert (ADDRESS_SPACE_LIMIT in declared) == per_process
        if per_process:
            assert "Node/V8" in declared[ADDRESS_SPACE_LIMIT]
        unlimited = dataclasses.replace(limited, limits=ResourceLimits())
        assert ADDRESS_SPACE_LIMIT not in runner.limitations(unlimited)
    finally:
        runner.close()
