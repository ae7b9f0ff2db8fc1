"""The enclosing repository's config names files inside the workspace.

``outer/.git/config`` says ``core.hooksPath = ws/hooks``, ``core.fsmonitor =
ws/tools/fsm.sh`` and ``alias.t = !sh ws/tools/t.sh``; the workspace is
``outer/ws``.  A command writes ``hooks/pre-commit``, ``tools/fsm.sh`` and
``tools/t.sh``; then the host's real ``git status``, ``git t`` and ``git commit``
run in ``outer`` (``HOME`` is the test's private directory, never the tester's).
None of what the command wrote may run; the benign alias must (the check is
not vacuous).  bwrap and docker, as root and as nobody; landlock (which
accepts ``landlock-protected-paths`` here) must report each file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import (
    LANDLOCK_ACCEPT,
    NOBODY,
    Box,
    Run,
    cli,
    docker_group,
    git,
    profile,
    runner_for,
)
from tests.runners.test_trusted_files import box as box
from tests.runners.test_trusted_gitsurface import executable, host_git, reported

CONFIG = "[core]\n\thooksPath = ws/hooks\n\tfsmonitor = ws/tools/fsm.sh\n[alias]\n\tt = !sh ws/tools/t.sh\n"


def _outer(box: Box) -> tuple[Path, Path]:
    """(outer checkout, its workspace ``outer/ws``) under the box's HOME."""
    outer = box.ws.parent / "outer"
    ws = outer / "ws"
    (ws / "tools").mkdir(parents=True)
    git(outer, "init", "-q", ".")
    with (outer / ".git" / "config").open("a") as config:
        config.write(CONFIG)
    executable(ws / "tools" / "t.sh", f"touch {box.ws.parent}/benign-alias\n")
    (outer / "README").write_text("x\n")
    box.own()
    return outer, ws


def run(box: Box, runner: str, ws: Path, script: str) -> Run:
    """The CLI in ``ws`` (below the box), HOME the box's private directory."""
    extra = ["--profile", profile(box, LANDLOCK_ACCEPT)] if runner == "landlock" else []
    argv = [*cli(box.user), "run", "--runner", runner, *extra, "-c", script]
    # A docker container that is this run's own: the host is judged right after the run, where a kept
    # container's placeholders would still stand (test_kept_containers covers those).
    env = {"PATH": os.environ["PATH"], "HOME": str(box.ws.parent), "LANG": "C.UTF-8",
           "DSH_SANDBOX_KEEP_WARM": "0"}
    kwargs: dict[str, object] = {}
    if box.user == "nobody":
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
    proc = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True, timeout=240,
                          check=False, **kwargs)  # type: ignore[call-overload]
    return Run(proc.returncode, proc.stdout, proc.stderr)


def _attack(base: Path) -> str:
    mark = f"#!/bin/sh\\ntouch {base}/pwned-$1\\n"
    return (f"mkdir -p hooks; printf '{mark}' > hooks/pre-commit; chmod +x hooks/pre-commit; "
            f"printf '{mark}' > tools/fsm.sh; chmod +x tools/fsm.sh; "
            f"echo 'touch {base}/pwned-alias' > tools/t.sh; exit 0")


@pytest.mark.parametrize("name", ["bwrap", "docker", "landlock"])
def test_files_the_enclosing_repositorys_config_runs_stay_read_only(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    base = box.ws.parent
    outer, ws = _outer(box)
    ran = run(box, runner, ws, _attack(base))
    if name == "landlock":  # cannot keep them read-only (accepted): the report must name them
        reported(ran, ws / "tools" / "fsm.sh", ws / "hooks" / "pre-commit", ws / "tools" / "t.sh")
        return
    assert ran.returncode == 0, ran.err
    host_git(box, outer, "status")
    host_git(box, outer, "t")
    host_git(box, outer, "add", "README")
    host_git(box, outer, "commit", "-q", "-m", "host commit")
    assert subprocess.run(["git", "-C", str(outer), "-c", "safe.directory=*", "log", "--oneline"],
                          capture_output=True, text=True, check=False).stdout.count("\n") == 1
    pwned = sorted(p.name for p in base.iterdir() if p.name.startswith("pwned"))
    assert pwned == [], f"host git ran what the sandboxed command wrote: {pwned}"
    assert (base / "benign-alias").exists(), "git t did not run the alias: the check would be vacuous"
    assert not (ws / "tools" / "fsm.sh").exists()
    assert not (ws / "hooks" / "pre-commit").exists()
    assert (ws / "tools" / "t.sh").read_text() == f"touch {base}/benign-alias\n"
