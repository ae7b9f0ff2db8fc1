"""Race ``renameat2(RENAME_EXCHANGE)`` swaps of policy paths against repeated runs.

Run as a script (``python -m tests.runners.pin_race RUNNER BASE SECONDS``) by
``test_pin_race``, as root and as nobody: it is the attacker and the victim at
once.  A swapper process exchanges a directory the policy names (the
workspace, a relative writable root, a nested workspace) with a symlink to a
directory outside every root, as fast as the kernel allows, while this process
configures a session and runs a command, again and again.  Every command tries
to write into the outside directory by its real path: that write succeeds only
if the swap made the outside directory writable.

Prints one JSON line: per scenario, how many runs ran, how many were refused
(a clean ``DshError``), and every other exception (a traceback at the CLI).
The host is judged by the caller: nothing may appear in the outside directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.errors import DshError
from dsh.sandbox.session import SessionSpec, build_session

LANDLOCK_ACCEPT = ("landlock-protected-paths", "landlock-metadata", "landlock-process-escape", "landlock-process-list")

# The swapper: a separate process, so it runs truly in parallel with the
# resolution (a thread would wait for the GIL).
SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
renameat2 = libc.renameat2
renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    renameat2(-100, a, -100, b, 2)
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    workspace: Path  # as the victim names it
    swapped: Path  # the directory swapped with a link
    link: Path  # the link, at first, pointing at ``outside``
    profile: str | None = None


def scenarios(base: Path, runner: str) -> list[Scenario]:
    """Lay out the three races under ``base`` (outside every root)."""
    outside = base / "outside"
    outside.mkdir()
    ws = base / "ws"
    ws.mkdir()
    (base / "ws-link").symlink_to(outside)
    rel = base / "rel"
    (rel / "build").mkdir(parents=True)
    (rel / "build-link").symlink_to(outside)
    accept = ', "landlock-metadata", "landlock-process-escape", "landlock-process-list"' if runner == "landlock" else ""
    profile = base / "rel.toml"
    profile.write_text(
        'extends = "workspace-write"\nwritable_roots = ["build"]\n'
        f'accept_degraded = ["landlock-protected-paths"{accept}]\n'
    )
    outer = base / "outer"
    (outer / "inner").mkdir(parents=True)
    (outer / "inner-link").symlink_to(outside)
    return [
        Scenario("workspace", ws, ws, base / "ws-link"),
        Scenario("relative-root", rel, rel / "build", rel / "build-link", str(profile)),
        Scenario("nested-workspace", outer / "inner", outer / "inner", outer / "inner-link"),
    ]


def _run_once(scenario: Scenario, runner: str, outside: Path, index: int, command: str | None = None) -> str:
    # What landlock cannot hold here (as nobody: no cgroup for the process tree).
    accept = LANDLOCK_ACCEPT if runner == "landlock" else ()
    spec = SessionSpec(
        executor="bash-sandbox",
        workspace=str(scenario.workspace),
        profile=scenario.profile,
        runner=runner,
        accept_degraded=() if scenario.profile else accept,
    )
    target = outside / f"pwned-{scenario.name}-{index}"
    try:
        with build_session(spec) as ctx:
            shell = ctx.require(ShellExecutor)
            request = ShellExecRequest(command=command or f"echo pwned > {target}", timeout_ms=60_000)
            result = shell.execute(shell.resolve(request)).result()
            return "escaped" if result.exit_code == 0 else "ran"
    except DshError as exc:
        _REFUSALS.setdefault(str(exc).split(";")[0][:300], None)
        return "refused"


#: The distinct refusals seen (first clause), for the report.
_REFUSALS: dict[str, None] = {}


def race(runner: str, base: Path, seconds: float) -> dict[str, dict[str, object]]:
    report: dict[str, dict[str, object]] = {}
    outside = base / "outside"
    for scenario in scenarios(base, runner):
        counts = {"ran": 0, "refused": 0, "escaped": 0}
        errors: list[str] = []
        # Unraced first: the setup lets a command write its own root (so a
        # refusal below is the race's doing, not a broken setup).
        inside = scenario.swapped / "control"
        control = _run_once(scenario, runner, outside, 0, f"echo ok > {inside}")
        control_ok = control == "escaped" and inside.is_file()
        swapper = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(scenario.swapped), str(scenario.link)],
            stdout=subprocess.PIPE,
        )
        try:
            assert swapper.stdout is not None
            swapper.stdout.readline()  # the swapper is about to loop
            deadline = time.monotonic() + seconds
            index = 0
            while time.monotonic() < deadline:
                index += 1
                try:
                    counts[_run_once(scenario, runner, outside, index)] += 1
                except Exception:  # what the CLI would print as a traceback
                    errors.append(traceback.format_exc(limit=-3))
        finally:
            swapper.kill()
            swapper.wait()
        report[scenario.name] = {**counts, "errors": errors[:5], "error_count": len(errors),
                                 "control": control_ok, "refusals": list(_REFUSALS)[:6]}
        _REFUSALS.clear()
    return report


def main() -> None:
    runner, base, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    os.environ.pop("TMPDIR", None)
    print(json.dumps(race(runner, base, seconds)))


if __name__ == "__main__":
    main()
