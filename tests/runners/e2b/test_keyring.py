"""The double is another machine: it shares no keyring with a caller in a login session.

A login session (pam_keyinit) gives the caller a session keyring that every
child inherits and possesses.  The conformance key scenarios are run from such
a session, with the double started there too, as CI's fresh machine does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.runners.e2b.conftest import need_sdk

SCRIPT = r"""
import ctypes, json, subprocess, sys
from pathlib import Path
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(250, 1, None) > 0, "could not join a new session keyring"
from tests.runners.e2b.envd_server import start_envd_server
root = Path(sys.argv[1])
url, stop = start_envd_server(root)
options = root.parent / "options.json"
options.write_text(json.dumps({"e2b": {"sandbox_url": url}}))
done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "conformance", "--runner", "e2b", "--mode", "read-only",
                       "--scenario", "key-user", "--scenario", "key-session", "--runner-options", str(options)],
                      capture_output=True, text=True)
stop()
print(json.dumps({"rc": done.returncode, "out": done.stdout[-2000:]}))
"""


def test_key_scenarios_hold_from_a_login_session(tmp_path: Path) -> None:
    need_sdk()
    root = tmp_path / "sandbox-root"
    root.mkdir()
    root.chmod(0o777)
    tmp_path.chmod(0o777)
    ran = subprocess.run([sys.executable, "-c", SCRIPT, str(root)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[3], timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0 and "2 pass" in result["out"], result["out"]
