"""Run ``dsh-sandbox`` as a real subprocess (bytes argv, as ``execvp`` gives it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

CLI_TIMEOUT_S = 180


def cli(
    *args: str | bytes,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    argv: list[str | bytes] = [sys.executable, "-m", "dsh.sandbox", *args]
    return subprocess.run(
        [os.fsencode(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def landlock_profile(directory: Path) -> Path:
    """A workspace-write profile that accepts Landlock's protected-path gap."""
    path = directory / "landlock-ok.toml"
    path.write_text(
        'extends = "workspace-write"\naccept_degraded = ["landlock-protected-paths", "landlock-metadata"]\n'
    )
    return path


def runner_flags(runner: str, profile_dir: Path) -> Sequence[str]:
    flags = ["--runner", runner]
    if runner == "landlock":
        flags += ["--profile", str(landlock_profile(profile_dir))]
    return flags
