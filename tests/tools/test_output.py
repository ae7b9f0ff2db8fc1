"""Long output: the tail is kept, the marker names the spill file, and the
spill file holds the whole stream (foreground results and lossy job reads)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from dsh.tools.jobs import JobRegistry

from tests.support.tools import bash, call, local_ctx, parsed
from tests.support.wait import PATIENCE_S

FULL = "".join(f"{i}\n" for i in range(1, 20001))


def test_foreground_truncation_keeps_the_tail_and_names_the_spill(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        result = bash(ctx, "seq 1 20000")
        p = parsed(result)
        assert p.exit_code == 0 and len(p.spill_paths) == 1
        assert result.content.endswith(
            f"19999\n20000\n[output truncated; full output: {p.spill_paths[0]}]"
        )
        assert FULL.endswith(p.body + "\n") and len(p.body) < len(FULL)
        # the file lives as long as the session (the context) does
        assert Path(p.spill_paths[0]).read_text() == FULL


def test_lossy_job_read_is_flagged_with_the_spill_path(workspace: Path) -> None:
    with local_ctx(workspace) as ctx:
        started = bash(ctx, "seq 1 20000", run_in_background=True)
        assert started.job_id
        assert cast(JobRegistry, ctx.require(JobRegistry)).wait(started.job_id, "agent-a", PATIENCE_S)
        first = call(ctx, "job_output", {"job_id": started.job_id})
        p = parsed(first)
        assert p.job_state == "completed" and p.spill_paths, first.content[-300:]
        assert Path(p.spill_paths[0]).read_text() == FULL
        assert FULL.endswith(p.body + "\n")
        second = parsed(call(ctx, "job_output", {"job_id": started.job_id}))
        assert second.body == "" and not second.spill_paths  # consumed, nothing lost since
