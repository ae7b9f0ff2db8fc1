"""Tool specs (both export formats; escalation fields only with a constraining
executor) and argument validation: bad input is a tool result, never a run."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.seam import ShellExecutor
from dsh.sandbox.context import Context, build_context
from dsh.tools.spec import ArgumentError, ToolSpec, validate_args
from dsh.tools.toolbox import export_specs, tool_specs

from tests.support.tools import bash, call, local_ctx

ESCALATION = {"sandbox_permissions", "justification"}


@contextmanager
def sandbox_spec_ctx(workspace: Path, executor: str, mode: str) -> Iterator[Context]:
    """A constraining composition; specs and rejections need no working runner."""
    ctx = build_context(
        [
            {"name": "sandbox-policy", "config": {"mode": mode, "workspace": str(workspace)}},
            {"name": "sandbox"},
            {"name": executor, "config": {"cwd": str(workspace)}},
            {"name": "jobs"},
        ]
    )
    try:
        yield ctx
    finally:
        ctx.close()


def props(spec: ToolSpec) -> set[str]:
    return set(spec.parameters["properties"])


def by_name(ctx: Context) -> dict[str, ToolSpec]:
    return {s.name: s for s in tool_specs(ctx)}


def test_export_formats(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        openai = export_specs(ctx, "openai")
        anthropic = export_specs(ctx, "anthropic")
    assert [t["function"]["name"] for t in openai] == ["bash", "job_output", "job_kill"]
    assert [t["name"] for t in anthropic] == ["bash", "job_output", "job_kill"]
    for o, a in zip(openai, anthropic, strict=True):
        assert o["type"] == "function" and set(o) == {"type", "function"}
        assert set(o["function"]) == {"name", "description", "parameters"}
        assert set(a) == {"name", "description", "input_schema"}
        assert o["function"]["parameters"] == a["input_schema"]
        assert o["function"]["description"] == a["description"]
        schema = a["input_schema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        json.dumps(o), json.dumps(a)  # plain JSON
    bash_schema = anthropic[0]["input_schema"]
    assert bash_schema["required"] == ["command", "description"]
    assert set(bash_schema["properties"]) == {
        "command", "description", "timeout_ms", "workdir", "run_in_background",
    }
    description = anthropic[0]["description"]
    for needle in ("fresh `bash -c`", "workdir", "[exit code: N]", "[killed by signal: X]",
                   "[output truncated; full output:", "job_output", "run_in_background"):
        assert needle in description


def test_escalation_fields_only_with_a_constraining_executor(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        local = by_name(ctx)["bash"]
    assert not props(local) & ESCALATION
    assert "sandbox_permissions" not in local.description
    with sandbox_spec_ctx(workspace, "bash-sandbox", "workspace-write") as ctx:
        assert ctx.require(ShellExecutor).constraining
        sandboxed = by_name(ctx)["bash"]
    assert ESCALATION <= props(sandboxed)
    assert sandboxed.parameters["required"] == ["command", "description"]
    for needle in ("workspace-write", "[sandbox: file access denied under workspace-write mode]",
                   "sandbox_permissions", "justification", "danger-full-access",
                   "a wider mode is not the fix for them"):
        assert needle in sandboxed.description
    with sandbox_spec_ctx(workspace, "bash-sandbox", "danger-full-access") as ctx:
        assert not ctx.require(ShellExecutor).constraining
        assert not props(by_name(ctx)["bash"]) & ESCALATION


def test_pwsh_mirrors_bash(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        bash_spec = by_name(ctx)["bash"]
    with local_ctx(workspace, executor="pwsh-local") as ctx:
        specs = by_name(ctx)
        assert set(specs) == {"pwsh", "job_output", "job_kill"}
        # the bash tool is not offered for a PowerShell executor, and vice versa
        assert call(ctx, "bash", {"command": "x", "description": "x"}).is_error
    pwsh = specs["pwsh"]
    assert pwsh.parameters == bash_spec.parameters
    assert "PowerShell" in pwsh.description and "Set-Location" in pwsh.description
    with sandbox_spec_ctx(workspace, "pwsh-sandbox", "read-only") as ctx:
        sandboxed = by_name(ctx)["pwsh"]
    assert ESCALATION <= props(sandboxed)
    assert "read-only" in sandboxed.description


BAD_ARGS: list[tuple[Any, str]] = [
    ({"command": 5, "description": "x"}, "command: must be a string, got 5"),
    ({"command": "touch ran", "description": "x", "run_in_background": "yes"},
     "run_in_background: must be true or false"),
    ({"command": "touch ran", "description": "x", "timeout_ms": -5},
     "timeout_ms: must be between 1 and 600000, got -5"),
    ({"command": "touch ran", "description": "x", "timeout_ms": 0}, "timeout_ms: must be between"),
    ({"command": "touch ran", "description": "x", "timeout_ms": 10**12}, "got 1000000000000"),
    ({"command": "touch ran", "description": "x", "timeout_ms": 1.5}, "must be an integer"),
    ({"command": "touch ran", "description": "x", "timeout_ms": True}, "must be an integer"),
    ({"command": "touch ran", "description": "x", "timeout_ms": "100"}, "must be an integer"),
    ({"command": "touch ran", "description": "x", "cwd": "/"}, "cwd: unknown field"),
    ({"command": "touch ran", "description": "x", "sandbox_permissions": "danger-full-access",
      "justification": "j"}, "sandbox_permissions: unknown field"),
    ({"command": "touch ran"}, "description: required field is missing"),
    ({"description": "x"}, "command: required field is missing"),
    ({"command": "", "description": "x"}, "command: must not be empty"),
    (["touch ran"], "expected a JSON object"),
    ("touch ran", "expected a JSON object"),
    (None, "expected a JSON object"),
]


@pytest.mark.parametrize(("args", "message"), BAD_ARGS)
def test_bad_arguments_are_a_result_and_nothing_runs(
    workspace: Path, args: Any, message: str
) -> None:
    with local_ctx(workspace) as ctx:
        result = call(ctx, "bash", args)
        assert result.is_error
        assert message in result.content and "Nothing was run." in result.content
        assert "Traceback" not in result.content
        assert not (workspace / "ran").exists()
        assert not bash(ctx, "touch ran").is_error  # the same command does run when valid
        assert (workspace / "ran").exists()


def test_every_problem_is_listed_at_once(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        result = call(ctx, "bash", {"command": 1, "timeout_ms": -1, "nope": 0})
    for part in ("command: must be a string", "timeout_ms: must be", "nope: unknown field",
                 "description: required"):
        assert part in result.content


def test_integral_floats_are_integers() -> None:
    spec = ToolSpec("t", "d", {"type": "object", "properties": {"n": {"type": "integer"}}})
    assert validate_args(spec, {"n": 5.0}) == {"n": 5}


def test_non_finite_numbers_are_refused() -> None:
    # JSON from a model may carry NaN or Infinity (json.loads accepts both).
    spec = ToolSpec("t", "d", {"type": "object", "properties": {
        "x": {"type": "number", "minimum": 0, "maximum": 10}, "n": {"type": "integer", "maximum": 10}}})
    assert validate_args(spec, {"x": 2.5, "n": 3}) == {"x": 2.5, "n": 3}
    for bad in ({"x": math.nan}, {"x": math.inf}, {"x": -math.inf}, {"n": math.nan}, {"n": math.inf}):
        with pytest.raises(ArgumentError, match=r"must be (a number|an integer)"):
            validate_args(spec, bad)


def test_unknown_tool_and_bad_job_args(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        unknown = call(ctx, "python", {})
        assert unknown.is_error and "unknown tool 'python'" in unknown.content
        assert "bash, job_output, job_kill" in unknown.content
        bad = call(ctx, "job_output", {"job_id": 3, "wait_ms": -1})
        assert bad.is_error and "job_id: must be a string" in bad.content
        assert "wait_ms: must be between 0" in bad.content


def test_infrastructure_errors_are_results(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        missing = bash(ctx, "true", workdir=str(workspace / "nope"))
        assert missing.is_error and "WORKDIR_INVALID" in missing.content
        assert "does not exist" in missing.content
    with local_ctx(workspace, executor="pwsh-local") as ctx:
        result = call(ctx, "pwsh", {"command": "Write-Output hi", "description": "x"})
        # pwsh may be missing here: then a clear result, not a traceback.
        assert result.is_error == ("SHELL_NOT_FOUND" in result.content)
        assert "Traceback" not in result.content
