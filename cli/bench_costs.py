"""What the protections cost, how a run's cost grows with the workspace, and a
tool call through the MCP server: the rest of ``dsh-sandbox bench``.

Each protection is timed alone (``Runner.protection_costs``), so a change that
makes one dearer shows in the change that caused it.  Reported, never enforced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dsh.cli.benchmarks import (
    Report,
    Section,
    _context,
    _local,
    _measure,
    _measure_interleaved,
    _runner_true,
    cli_env,
    cli_exe,
    degradation_flags,
    sessions,
    summary,
)

#: A run in a workspace of many entries may cost at most this much more than
#: in a small one (the protected-file search must not grow with the tree).
TREE_TARGET = 1.5
#: A ``bash`` tool call of ``true`` through the MCP server over the same call in-process.
MCP_TARGET = 2.0


def bench_protections(report: Report, runners: Sequence[str], n: int, workspace: Path) -> None:
    """Each local runner's protections (``Runner.protection_costs``), timed alone."""
    from dsh.sandbox.host import SandboxHost
    from dsh.sandbox.policy_service import PolicyService

    for runner, ctx in sessions(report, _local(runners), workspace, "{} protections"):
        assert runner is not None
        try:
            instance = ctx.require(SandboxHost).runner(runner)
            for cost in instance.protection_costs(ctx.require(PolicyService).resolve()) if instance else ():
                try:
                    timing = _measure(f"{runner}: {cost.label}", cost.run, n)
                    report.timings.append(dataclasses.replace(timing, note=f"protection, per {cost.per}"))
                finally:
                    if cost.close is not None:
                        cost.close()
        except Exception as exc:
            report.skipped[f"{runner} protections"] = f"{type(exc).__name__}: {exc}"


def make_tree(parent: Path, entries: int) -> Path:
    """A tree of about ``entries`` entries: directories of nine empty files, a
    hundred directories to a parent (the shape of a source checkout)."""
    root = Path(tempfile.mkdtemp(prefix="dsh-bench-tree-", dir=parent))
    for index in range(max(1, entries // 10)):
        leaf = root / f"d{index // 100}" / f"e{index % 100}"
        leaf.mkdir(parents=True)
        for name in range(9):
            (leaf / f"f{name}").touch()
    return root


def bench_tree(report: Report, runners: Sequence[str], n: int, workspace: Path, entries: int) -> None:
    """The protected-file search over a small workspace and a big tree (a fresh
    search, as each ``dsh-sandbox run`` makes, and a session's repeated one), and
    ``run -- true`` in each, interleaved."""
    from dsh.sandbox.protected_scan import DEFAULT_PROTECTED_NAMES, TreeIndex

    tree = make_tree(workspace.parent, entries)
    try:
        label = f"{entries:,} entries"

        def fresh(root: Path) -> Callable[[], object]:
            return lambda: TreeIndex(DEFAULT_PROTECTED_NAMES).refresh([root])

        for name, root in (("bench workspace", workspace), (label, tree)):
            samples = n if root == workspace else max(5, n // 5)
            report.timings.append(_measure(f"protected-file search, {name}, fresh", fresh(root), samples, warmup=1))
        index = TreeIndex(DEFAULT_PROTECTED_NAMES)
        report.timings.append(_measure(f"protected-file search, {label}, repeated in a session",
                                       lambda: index.refresh([tree]), max(5, n // 5), warmup=1))
        local = _local(runners)
        exe = cli_exe(report)
        if exe is None or not local:
            return
        runner = local[0]
        base = [exe, "run", "--runner", runner, *degradation_flags(runner)]
        small, big = (f"dsh-sandbox run --runner {runner} -- true, {what}" for what in ("small workspace", label))
        commands = [(small, [*base, "--workspace", str(workspace), "--", "true"]),
                    (big, [*base, "--workspace", str(tree), "--", "true"])]
        _measure_interleaved(commands, max(5, n // 2), workspace, cli_env(), report)
        report.targets.append((big, small, TREE_TARGET, "<="))
    finally:
        shutil.rmtree(tree, ignore_errors=True)


async def _mcp_rounds(argv: list[str], workspace: Path, n: int,
                      run: Callable[[], object]) -> tuple[list[float], list[float]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(workspace), env=cli_env())
    through: list[float] = []
    local: list[float] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        for round_ in range(n + 3):  # three warm-up rounds
            t0 = time.perf_counter()
            result = await client.call_tool("bash", {"command": "true", "description": "bench: run true"})
            elapsed = (time.perf_counter() - t0) * 1000
            if result.is_error:
                raise RuntimeError(f"the bash tool failed: {result.content!r}"[:300])
            t0 = time.perf_counter()
            run()
            if round_ >= 3:
                through.append(elapsed)
                local.append((time.perf_counter() - t0) * 1000)
    return through, local


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def bench_mcp(report: Report, runners: Sequence[str], n: int, workspace: Path) -> None:
    """A ``bash`` tool call of ``true`` through ``dsh-sandbox mcp`` (a real MCP
    client over stdio) against the same call in-process, round by round."""
    local = _local(runners)
    exe = cli_exe(report)
    if exe is None or not local:
        return
    runner = local[0]
    argv = [exe, "mcp", "--runner", runner, *degradation_flags(runner), "--workspace", str(workspace)]
    with _context(runner, workspace) as ctx:
        try:
            through, direct = asyncio.run(_mcp_rounds(argv, workspace, n, _runner_true(ctx)))
        except BaseExceptionGroup as group:  # the client's task groups wrap the failure
            raise _first_leaf(group) from None
    via, inproc = f"MCP bash tool call on {runner}: true", f"in-process {runner} true, same rounds"
    report.timings += [summary(via, through, "real MCP client, stdio"), summary(inproc, direct, "interleaved")]
    report.targets.append((via, inproc, MCP_TARGET, "<="))


def sections(runners: Sequence[str], n: int, tree_entries: int) -> list[tuple[str, Section]]:
    """The measures above as ``run_all`` sections; ``tree_entries`` 0 leaves the tree out."""
    chosen: list[tuple[str, Section]] = [
        ("protections", lambda report, ws: bench_protections(report, runners, n, ws)),
        ("mcp", lambda report, ws: bench_mcp(report, runners, n, ws)),
    ]
    if tree_entries:
        chosen.insert(1, ("tree", lambda report, ws: bench_tree(report, runners, n, ws, tree_entries)))
    return chosen
