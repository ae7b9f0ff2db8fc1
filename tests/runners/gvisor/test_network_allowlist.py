"""gVisor with the network limited to named hosts (``SandboxPolicy.network_allowlist``).

As root the sandbox is started inside the host's allowlist namespace with
runsc's ``--network=host``: gVisor's sockets are then the namespace's, whose
only service is the proxy.  The same probe as bwrap's: the allowed name
through the proxy, a denied one refused and reported, no direct connection,
no UDP, no DNS, the proxy's port not to be taken.  Without root runsc cannot
use a host network at all, and the runner refuses the policy with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from dsh.runners.gvisor import GvisorRunner
from dsh.sandbox.net_rules import parse

from tests.runners.gvisor.helpers import policy, run
from tests.support.net_probe import HOST, check_probe, run_scenario
from tests.support.require import require_runner


def test_the_command_reaches_only_the_allowed_names_through_the_proxy(ws: Path, probe_host: dict[str, Any]) -> None:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: runsc's host network needs root")
    runner = GvisorRunner(proxy_resolver=probe_host["resolver"])
    require_runner("gvisor", runner)
    limited = dataclasses.replace(policy(ws), network_allowlist=parse(["allowed.test"],
                                                                      allow_private_for=["allowed.test"]))
    probe = ["python3", "-I", "-S", "-c", probe_host["PROBE"], str(probe_host["port"])]
    try:
        first = run(runner, probe, limited)
        mark = runner.network_mark(limited)
        second = run(runner, probe, limited)
        assert second.status.exit_code == 0, second.text
        check_probe(json.loads(second.out))
        assert first.status.exit_code == 0 and b'"allowed": "hello from the host"' in first.out, first.text
        assert runner.network_refused(limited, mark) == ("denied.test",)
        assert runner.explain(limited).network.startswith("allowlist: only through the host's proxy")
        # The network off is another sandbox, with gVisor's own loopback and no proxy.
        off = run(runner, ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 3128), 5)"],
                  policy(ws))
        assert off.status.exit_code != 0 and b"ConnectionRefusedError" in off.err, off.text
    finally:
        runner.close()


REFUSAL = HOST + r"""
import tempfile
from pathlib import Path
from dsh.runners.gvisor import GvisorRunner
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_rules import parse
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-allowlist-", dir="/var/tmp")).resolve()
p = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=ws, network_allowlist=parse(["allowed.test"]))
runner = GvisorRunner(proxy_resolver=resolver)
try:
    runner.prepare(["true"], p, cwd=str(ws), env={})
    reason = "prepared"
except SandboxUnavailable as exc:
    reason = exc.reason
made = len(runner._warm)
runner.close()
server.shutdown()
shutil.rmtree(ws)
print(json.dumps({"reason": reason, "made": made}))
"""


def test_without_root_the_policy_is_refused_with_the_reason() -> None:
    require_runner("gvisor")
    result = run_scenario(REFUSAL, as_nobody=True)
    assert result["reason"].startswith("gVisor limits the network to named hosts only as root"), result
    assert "--runner bwrap" in result["reason"] and result["made"] == 0
