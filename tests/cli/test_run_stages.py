"""The test command's stages (``tests/stages.sh``, sourced by ``tests/run.sh``).

A failing check must not hide the checks after it: every stage runs, a summary
of all of them ends the output, the exit status is 1 when any failed, and only a
failed setup step stops the run (with the summary).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "tests" / "stages.sh"


def _run(script: str, tmp_path: Path, tick: str = "30") -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash") or "/bin/bash"
    return subprocess.run(
        [bash, "-c", f'set -uo pipefail; logs="$1"; . "$2"\n{script}', "bash", str(tmp_path), str(STAGES)],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "DSH_TICK_S": tick},
    )


def test_every_stage_runs_after_a_failure_and_the_summary_names_them(tmp_path: Path) -> None:
    done = _run(
        """
        stage first false
        stage second true
        background side "a side job" sh -c 'echo from the side; exit 3'
        stage third sh -c 'echo third ran'
        collect side || true
        finish
        """,
        tmp_path,
    )
    assert done.returncode == 1, done
    out = done.stdout
    assert "third ran" in out and "from the side" in out, out
    summary = out[out.index("== summary"):]
    lines = summary.splitlines()
    assert [line.split()[0] for line in lines[1:5]] == ["first", "second", "third", "a"], summary
    assert "FAILED (exit 1)" in lines[1] and " ok " in lines[2] and " ok " in lines[3], summary
    assert "FAILED (exit 3)" in lines[4], summary
    assert lines[-1] == "tests/run.sh: FAILED", summary


def test_all_passing_stages_exit_zero(tmp_path: Path) -> None:
    done = _run("stage one true\nstage two true\nfinish", tmp_path)
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[-1] == "tests/run.sh: every stage passed", done.stdout


def test_a_failed_setup_stops_the_run_with_the_summary(tmp_path: Path) -> None:
    done = _run("setup install false\nstage never sh -c 'echo should not run'\nfinish", tmp_path)
    assert done.returncode == 1, done
    assert "should not run" not in done.stdout
    assert "(setup failed: the stages after it did not run)" in done.stdout, done.stdout
    assert "install" in done.stdout[done.stdout.index("== summary"):], done.stdout


def test_a_background_stage_reports_its_own_running_time(tmp_path: Path) -> None:
    done = _run("background quick 'a quick job' true\nstage slow sleep 3\ncollect quick\nfinish", tmp_path)
    assert done.returncode == 0, done
    [line] = [x for x in done.stdout.splitlines() if x.startswith("-- a quick job:")]
    assert line == "-- a quick job: ok in 0 s", done.stdout  # not the 3 s until it was collected


def test_a_long_step_says_it_is_still_running(tmp_path: Path) -> None:
    done = _run("setup slow sleep 3\nfinish", tmp_path, tick="1")
    assert done.returncode == 0, done
    assert "... slow: still running" in done.stdout, done.stdout
