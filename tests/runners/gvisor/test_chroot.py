"""In a chroot the kernel refuses the user namespace runsc makes: gVisor's
refusal names the chroot instead of a bare ``operation not permitted``
(schroot, pbuilder and sbuild users meet it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.sandboxed import need_runner


def test_the_refusal_in_a_chroot_names_the_chroot(workspace: Path) -> None:
    need_runner("gvisor")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("chroot") is None:
        pytest.skip("SANDBOX_UNAVAILABLE: entering a chroot needs root, unshare and chroot")
    root = Path(tempfile.mkdtemp(prefix="dsh-chroot-", dir="/var/tmp"))
    try:
        # A private mount namespace: the whole host bound at ROOT, then chroot into it, as schroot does.
        inner = f"cd {workspace} && exec {sys.executable} -P -m dsh.cli run --runner gvisor -- true"
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", 'mount --rbind / "$1" && exec chroot "$1" sh -c "$2"', "sh",
             str(root), inner],
            capture_output=True, text=True, timeout=240, check=False,
        )
    finally:
        os.rmdir(root)
    assert done.returncode == 125, done.stderr
    assert "the kernel refuses new user namespaces inside a chroot" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
