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
    if os.environ.get("DSH_FRESH_MACHINE") != "1":
        return ("opt-in (about 7 minutes and 1 GB of downloads): set DSH_FRESH_MACHINE=1; "
                "CI's .ci/run sets it")
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
    # The host's trust went in: pip inside uses a CA bundle (the host's or its
    # configured one), so a TLS-intercepting proxy's CA reaches it.
    assert "fresh-machine: trust passed in:" in done.stdout and "pip's cert = " in done.stdout, report
    for run in ("root", "sudo-user"):
        assert f"fresh-machine: [{run}] ok" in done.stdout, report
        # The README's demo: the echo ran, the write to /etc was refused.
        assert f"[{run}] hello from the sandbox" in done.stdout, report
        assert f"[{run}] (write to /etc denied)" in done.stdout, report


def test_fresh_machine_names_its_runs_on_a_bad_choice() -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "--only", "everything"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done
    assert "--only takes root, sudo-user, full or full-sudo-user, not 'everything'" in done.stderr


def test_test_command_as_a_user_without_sudo_stops_before_doing_anything(trusted_dir: Path) -> None:
    """Not root and no sudo: one line saying why root is needed, exit 2, nothing installed."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        unavailable("fresh-machine", "switches to nobody with setpriv: run as root")
    tmp_path = trusted_dir  # nobody can reach it, unlike pytest's tmp_path
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "run.sh", checkout / "tests" / "run.sh")
    # Only what the script's first lines use: no sudo, no apt-get, no python3.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dirname", "id"):
        found = shutil.which(tool)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    for path in (tmp_path, checkout, checkout / "tests", checkout / "tests" / "run.sh", tools):
        path.chmod(0o755)
    done = subprocess.run(
        [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         shutil.which("bash") or "/bin/bash", str(checkout / "tests" / "run.sh")],
        env={"PATH": str(tools)}, cwd="/", capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done
    assert done.stderr == (
        "tests/run.sh: needs root (Docker daemon, cgroups, conformance as nobody):"
        " run it as root, or install sudo\n"
    )
    assert done.stdout == ""
    assert sorted(p.name for p in checkout.iterdir()) == ["tests"]
