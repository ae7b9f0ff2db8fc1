"""Policy paths swapped for symlinks while runs resolve them (``pin_race``),
on every local runner, as root and as nobody, judged from the host.

A swapper exchanges (``renameat2(RENAME_EXCHANGE)``) the workspace, a
relative writable root or a nested workspace with a symlink to a directory
outside every root, as fast as it can, while the same user configures a
session and runs a command again and again.  Each command tries to write into
the outside directory.  Every run must either run inside its roots or be
refused with a clean error; none may write outside or die with a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runners.pin_race import SWAPPER
from tests.runners.test_trusted_files import NOBODY, _reachable_by_nobody, docker_group
from tests.support.require import require_runner
from tests.support.runners import nobody_python

RUNNERS = ("landlock", "bwrap", "docker")
USERS = ("caller", "nobody")
#: Per scenario (three per test): long enough for hundreds of raced
#: resolutions on the local runners, a handful of containers on docker.
SECONDS = {"landlock": 7.0, "bwrap": 7.0, "docker": 8.0}
SCRIPT = Path(__file__).with_name("pin_race.py")


def _python(user: str) -> str:
    if user != "nobody" or (_reachable_by_nobody(sys.executable)
                            and _reachable_by_nobody(os.path.realpath(sys.executable))):
        return sys.executable
    made = nobody_python()
    if made is None:
        pytest.skip("SANDBOX_UNAVAILABLE: no interpreter nobody can run (set DSH_NOBODY_PYTHON)")
    return made


@pytest.fixture
def base() -> Iterator[Path]:
    # Outside /tmp and $TMPDIR (writable roots of every run): the outside
    # directory must be writable only through a swap.
    made = Path(tempfile.mkdtemp(prefix="dsh-pin-race-", dir="/var/tmp")).resolve()
    os.chmod(made, 0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _everything_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("runner", RUNNERS)
def test_swapped_policy_paths_never_redirect_a_run(runner: str, user: str, base: Path) -> None:
    require_runner(runner)
    kwargs: dict[str, object] = {}
    if user == "nobody":
        if os.geteuid() != 0:
            pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
        if runner == "docker" and not docker_group():
            pytest.skip("SANDBOX_UNAVAILABLE: docker: no docker group lets nobody reach the daemon")
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
    python = _python(user)
    race = base / "race"
    race.mkdir()
    script = base / "pin_race.py"
    shutil.copyfile(SCRIPT, script)
    os.chmod(script, 0o644)
    if user == "nobody":
        os.chown(race, NOBODY, NOBODY)
    env = {"PATH": os.environ["PATH"], "HOME": str(base), "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [python, str(script), runner, str(race), str(SECONDS[runner])],
        cwd=base, env=env, capture_output=True, text=True, timeout=300, check=False,
        **kwargs,  # type: ignore[arg-type]
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(report) == {"workspace", "relative-root", "nested-workspace"}
    for name, counts in report.items():
        # No traceback: a race is a clean refusal or a run inside the roots.
        assert counts["error_count"] == 0, f"{name}: {counts['errors']}"
        assert counts["escaped"] == 0, f"{name}: {counts}"
        # Unraced, the same session writes its own root: the setup works.
        assert counts["control"], f"{name}: the unraced run could not write its root: {counts}"
        # The race is real: runs met the link.  On the local runners some met
        # the directory and ran too; a container takes long enough to make
        # that docker may refuse every raced run (its binds are checked).
        assert counts["refused"] >= 1, f"{name}: {counts}"
        if runner != "docker":
            assert counts["ran"] >= 1, f"{name}: {counts}"
    # The host afterwards: nothing at all was written outside the roots, but
    # for docker's one named residual (docs/threat-model.md): when the daemon
    # bound the swapped-in directory, runc made the empty mount points of the
    # nested read-only binds there before the bind check refused the run.
    left = _everything_under(race / "outside")
    if runner == "docker":
        left = [name for name in left if not _empty_mount_point(race / "outside" / name)]
    assert left == []


def _empty_mount_point(path: Path) -> bool:
    """An empty directory named after a protected path (a nested bind's mount point)."""
    return path.is_dir() and not any(path.iterdir()) and path.name in {".dsh", ".git"}


#: Long enough for a few dozen CLI starts with the swapper running.
CLI_SECONDS = 20.0


@pytest.mark.parametrize("user", USERS)
def test_the_cli_never_prints_a_traceback_under_swaps(user: str, base: Path) -> None:
    """The same race through the real CLI: a swapped workspace is a clean
    refusal (exit 2 or 125) or a run inside the roots, never a traceback."""
    require_runner("bwrap")
    kwargs: dict[str, object] = {}
    if user == "nobody":
        if os.geteuid() != 0:
            pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    python = _python(user)
    race = base / "race"
    for d in (race, race / "ws", race / "outside"):
        d.mkdir()
        if user == "nobody":
            os.chown(d, NOBODY, NOBODY)
    (race / "link").symlink_to(race / "outside")
    swapper = subprocess.Popen(
        [python, "-c", SWAPPER, str(race / "ws"), str(race / "link")], stdout=subprocess.PIPE, **kwargs,  # type: ignore[call-overload]
    )
    codes: dict[int, int] = {}
    tracebacks: list[str] = []
    try:
        assert swapper.stdout is not None
        swapper.stdout.readline()
        env = {"PATH": os.environ["PATH"], "HOME": str(base), "LANG": "C.UTF-8"}
        deadline = time.monotonic() + CLI_SECONDS
        index = 0
        while index < 4 or time.monotonic() < deadline:
            index += 1
            # Exit 3: the command ran and its write outside was refused.
            script = f"echo pwned > {race}/outside/p{index} || exit 3"
            proc = subprocess.run(
                [python, "-P", "-m", "dsh.cli", "run", "--runner", "bwrap", "--workspace", str(race / "ws"),
                 "--", "sh", "-c", script],
                cwd=base, env=env, capture_output=True, text=True, timeout=120, check=False,
                **kwargs,  # type: ignore[arg-type]
            )
            codes[proc.returncode] = codes.get(proc.returncode, 0) + 1
            if "Traceback" in proc.stderr:
                tracebacks.append(proc.stderr[-1500:])
    finally:
        swapper.kill()
        swapper.wait()
    assert tracebacks == [], tracebacks[0]
    assert set(codes) <= {2, 3, 125}, codes
    assert _everything_under(race / "outside") == []
