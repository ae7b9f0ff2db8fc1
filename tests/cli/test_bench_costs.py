"""``dsh-sandbox bench``'s cost rows: each protection timed alone, the protected-file
search and a run in a big tree against a small workspace, and a tool call through
the MCP server against the same call in-process."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.cli.bench_costs import bench_mcp, bench_protections, bench_tree, make_tree
from dsh.cli.benchmarks import Report, compute_ratios

from tests.support.require import require_runner


@pytest.fixture
def workspace() -> Iterator[Path]:
    # A parent of its own: the tree is made beside the workspace, and must be gone after.
    parent = Path(tempfile.mkdtemp(prefix="dsh-bench-test-", dir="/var/tmp"))
    (parent / "ws").mkdir()
    try:
        yield parent / "ws"
    finally:
        shutil.rmtree(parent)


def _bench_cgroups() -> list[str]:
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for place in (hierarchy, *hierarchy.glob("*")):
            if place.is_dir():
                found += [p.name for p in place.glob("dsh-bench-*")]
    return found


def test_each_protection_is_timed_alone_and_leaves_nothing(workspace: Path) -> None:
    require_runner("bwrap")
    require_runner("landlock")
    report = Report()
    bench_protections(report, ("bwrap", "landlock"), 5, workspace)
    assert not report.skipped, report.skipped
    rows = {t.name: t for t in report.timings}
    expected = ["bwrap: host probe (trial sandbox, bwrap --version)", "bwrap: syscall filter compiled",
                "landlock: rules planned and the Landlock ruleset built", "landlock: syscall filter compiled"]
    if os.geteuid() == 0:  # cgroups are writable by root here
        expected += [f"{r}: {what}" for r in ("bwrap", "landlock")
                     for what in ("command cgroup and its keeper, made and removed",
                                  "command cgroup from the session's pool")]
    for name in expected:
        assert name in rows, (name, sorted(rows))
        assert rows[name].samples == 5 and rows[name].median_ms > 0
        assert rows[name].note in ("protection, per CLI run", "protection, per command")
    assert rows["bwrap: syscall filter compiled"].note == "protection, per CLI run"
    assert _bench_cgroups() == []


def test_the_search_and_a_run_are_timed_in_a_big_tree_against_a_small_workspace(workspace: Path) -> None:
    require_runner("bwrap")
    tree = make_tree(workspace.parent, 2_000)
    assert sum(len(dirs) + len(files) for _, dirs, files in os.walk(tree)) == 200 * 10 + 2
    shutil.rmtree(tree)
    report = Report()
    bench_tree(report, ("bwrap",), 5, workspace, 2_000)
    compute_ratios(report)
    rows = {t.name: t for t in report.timings}
    for name in ("protected-file search, bench workspace, fresh", "protected-file search, 2,000 entries, fresh",
                 "protected-file search, 2,000 entries, repeated in a session",
                 "dsh-sandbox run --runner bwrap -- true, small workspace",
                 "dsh-sandbox run --runner bwrap -- true, 2,000 entries"):
        assert name in rows and rows[name].median_ms > 0, (name, report.skipped)
    ratio = next(r for r in report.ratios if r["measure"].endswith("2,000 entries"))
    assert ratio["baseline"].endswith("small workspace") and ratio["target"] == "<= 1.5x"
    assert os.listdir(workspace.parent) == ["ws"]  # the tree is gone


def test_a_tool_call_through_the_mcp_server_is_set_against_the_same_call_in_process(workspace: Path) -> None:
    require_runner("bwrap")
    report = Report()
    bench_mcp(report, ("bwrap",), 5, workspace)
    compute_ratios(report)
    rows = {t.name: t for t in report.timings}
    via, direct = "MCP bash tool call on bwrap: true", "in-process bwrap true, same rounds"
    assert rows[via].samples == rows[direct].samples == 5, report.skipped
    # The same command both ways: through the server can only cost more.
    assert rows[via].median_ms > rows[direct].median_ms > 0
    assert [(r["measure"], r["baseline"], r["target"]) for r in report.ratios] == [(via, direct, "<= 2.0x")]
