"""Started from a working directory that was removed meanwhile: every command
that reads the cwd says so (exit 2, no traceback), as root and as nobody;
help and completion still work."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import NOBODY, cli

COMMANDS = [
    ["run", "--", "true"],
    ["run", "--mode", "read-only", "--", "true"],
    ["run", "--workspace", "/", "--mode", "read-only", "--", "true"],
    ["config", "show"],
    ["runners"],
    ["tool", "call", "bash", '{"command": "true"}'],
    ["profile", "explain", "workspace-write"],
]


@pytest.fixture(params=["caller", "nobody"])
def gone(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """A user, and a directory it stands in after it was removed."""
    user: str = request.param
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    base = Path(tempfile.mkdtemp(prefix="dsh-cwd-gone-", dir="/var/tmp")).resolve()
    os.chmod(base, 0o755)
    (base / "home").mkdir()
    (base / "p" / "d").mkdir(parents=True)  # p: the user's own, so it may remove d
    if user == "nobody":
        for p in (base / "home", base / "p", base / "p" / "d"):
            os.chown(p, NOBODY, NOBODY)
    try:
        yield user, base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _in_removed_dir(user: str, base: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    # The shell enters d, removes it, then starts the CLI there (exec: no fork in between).
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    kwargs: dict[str, object] = {}
    if user == "nobody":
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        ["/bin/sh", "-c", script, "sh", str(base / "p" / "d"), *cli(user), *args],
        env={"PATH": os.environ["PATH"], "HOME": str(base / "home"), "LANG": "C.UTF-8"},
        capture_output=True, text=True, timeout=120, check=False, **kwargs,
    )


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_a_removed_cwd_is_a_clear_error(gone: tuple[str, Path], args: list[str]) -> None:
    user, base = gone
    done = _in_removed_dir(user, base, args)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert "the current directory no longer exists" in done.stderr and "cd to an existing directory" in done.stderr


def test_help_and_completion_need_no_cwd(gone: tuple[str, Path]) -> None:
    user, base = gone
    helped = _in_removed_dir(user, base, ["run", "--help"])
    assert helped.returncode == 0 and "Usage:" in helped.stdout, helped.stderr
    (base / "p" / "d").mkdir()
    if user == "nobody":
        os.chown(base / "p" / "d", NOBODY, NOBODY)
    completion = _in_removed_dir(user, base, ["completion", "bash"])
    assert completion.returncode == 0 and completion.stdout, completion.stderr
