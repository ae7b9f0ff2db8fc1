"""Run ``dsh-sandbox`` as a real subprocess (bytes argv, as ``execvp`` gives it)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

CLI_TIMEOUT_S = 180


def cli(
    *args: str | bytes,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    argv: list[str | bytes] = [sys.executable, "-P", "-m", "dsh.cli", *args]
    return subprocess.run(
        [os.fsencode(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def trusted_config_dir() -> Path:
    """A directory outside every default writable root (/tmp, $TMPDIR, the
    workspace) for profiles and rules files: ``run`` refuses them elsewhere."""
    global _TRUSTED
    if _TRUSTED is None:
        _TRUSTED = Path(tempfile.mkdtemp(prefix="dsh-cli-test-", dir="/var/tmp")).resolve()
        _TRUSTED.chmod(0o755)
        atexit.register(shutil.rmtree, _TRUSTED, ignore_errors=True)
    return _TRUSTED


_TRUSTED: Path | None = None


def dsh_home_for(tmp_path: Path) -> Path:
    """A ``DSH_HOME`` (the escalation log) for one test, outside every writable
    root: a root overlapping dsh-sandbox's own state is refused."""
    path = trusted_config_dir() / f"dsh-home-{tmp_path.name}"
    path.mkdir(exist_ok=True)
    return path


def landlock_profile() -> Path:
    """A workspace-write profile that accepts Landlock's protected-path gap."""
    path = trusted_config_dir() / "landlock-ok.toml"
    path.write_text(
        'extends = "workspace-write"\n'
        'accept_degraded = ["landlock-protected-paths", "landlock-metadata", "landlock-process-list"]\n'
    )
    return path


def runner_flags(runner: str) -> Sequence[str]:
    flags = ["--runner", runner]
    if runner == "landlock":
        flags += ["--profile", str(landlock_profile())]
    return flags
