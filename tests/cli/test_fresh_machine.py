"""The README's first command on a fresh Debian 12, as root and as a sudo user.

Runs ``.ci/fresh-machine.sh`` (its fast variant): a minimal Debian 12 root
filesystem from Debian's archive, the committed checkout (``git archive
HEAD``), the command read from README.md.  Minutes, not seconds: mostly
``apt-get`` and ``pip``.  The full variant (``--full``, the test suite inside)
is run by hand; see the README's "Fresh machine".
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.require import unavailable

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "fresh-machine.sh"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "it builds and enters a root filesystem: run as root"
    for tool in ("mmdebstrap", "unshare", "git"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install {tool})"
    if not (ROOT / ".git").exists():
        return "not a git checkout: the script copies in `git archive HEAD`"
    return None


@pytest.mark.slow
def test_readme_first_command_works_on_fresh_debian_as_root_and_sudo_user() -> None:
    missing = _missing()
    if missing is not None:
        unavailable("fresh-machine", missing)
    done = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1800, check=False
    )
    report = f"\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, f".ci/fresh-machine.sh failed (exit {done.returncode}){report}"
    for run in ("root", "sudo-user"):
        assert f"fresh-machine: [{run}] ok" in done.stdout, report
        # The README's demo: the echo ran, the write to /etc was refused.
        assert f"[{run}] hello from the sandbox" in done.stdout, report
        assert f"[{run}] (write to /etc denied)" in done.stdout, report
