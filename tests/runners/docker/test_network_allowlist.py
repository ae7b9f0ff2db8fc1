"""docker with the network limited to named hosts (``SandboxPolicy.network_allowlist``).

The container keeps ``network_mode=none``; the host's allowlist proxy listens
inside its network namespace.  The command reaches the proxy and nothing else:
the allowed name works through the proxy variables, a denied one gets 403 and
is reported, and the host's loopback, UDP and DNS stay out of reach.  Entering
the container's namespace needs root: as a member of the docker group the
runner refuses the policy, and never runs with the network off or on instead.
"""

from __future__ import annotations

import grp
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.runners.docker import DockerRunner
from dsh.sandbox.net_rules import parse

from tests.runners.docker.helpers import policy, run
from tests.support.net_probe import HOST, check_probe
from tests.support.require import require_runner
from tests.support.runners import nobody_python


@pytest.fixture
def host() -> Iterator[dict[str, Any]]:
    """The probe's host side in this process: a loopback server, and the resolver that names it."""
    names: dict[str, Any] = {}
    exec(HOST, names)
    try:
        yield names
    finally:
        names["server"].shutdown()


def test_the_command_reaches_only_the_allowed_names_through_the_proxy(
        workspace: Path, host: dict[str, Any]) -> None:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: entering the container's network namespace needs root")
    runner = DockerRunner(proxy_resolver=host["resolver"])
    require_runner("docker", runner)
    rules = parse(["allowed.test"], allow_private_for=["allowed.test"])
    limited = policy(workspace, network_allowlist=rules)
    try:
        first = run(runner, ["python3", "-I", "-S", "-c", host["PROBE"], str(host["port"])], limited)
        mark = runner.network_mark(limited)
        second = run(runner, ["python3", "-I", "-S", "-c", host["PROBE"], str(host["port"])], limited)
        assert second.status.exit_code == 0, second.stderr
        check_probe(json.loads(second.stdout))
        assert first.status.exit_code == 0 and b'"allowed": "hello from the host"' in first.stdout, first.stdout
        assert runner.network_refused(limited, mark) == ("denied.test",)
        assert runner.explain(limited).network.startswith("allowlist: only through the host's proxy")
        # The proxy variables name the namespace's own loopback; nothing else reaches the host.
        env = run(runner, ["sh", "-c", "echo $HTTPS_PROXY $ALL_PROXY"], limited)
        assert env.stdout.split() == [b"http://127.0.0.1:3128", b"socks5h://127.0.0.1:3128"]
        # A policy with the network off gets a container of its own, with no proxy in it.
        off = run(runner, ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 3128), 5)"],
                  policy(workspace))
        assert off.status.exit_code != 0 and b"ConnectionRefusedError" in off.stderr, off.stderr
    finally:
        runner.close()
    assert all(w.proxy is None for w in runner._warm.values())


def test_a_docker_group_member_is_refused_with_the_reason(workspace: Path) -> None:
    """Not root: the runner cannot enter the daemon's namespaces, so it refuses
    before making anything, naming root and bwrap as the ways out."""
    require_runner("docker")
    python = nobody_python()
    if os.geteuid() != 0 or python is None:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root and DSH_NOBODY_PYTHON")
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        pytest.skip("SANDBOX_UNAVAILABLE: no docker group to run nobody in")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dsh.runners.docker import DockerRunner\n"
        "from dsh.sandbox.errors import SandboxUnavailable\n"
        "from dsh.sandbox.modes import SandboxMode\n"
        "from dsh.sandbox.net_rules import parse\n"
        "from dsh.sandbox.policy import SandboxPolicy\n"
        "ws = Path(sys.argv[1])\n"
        "p = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=ws, network_allowlist=parse(['allowed.test']))\n"
        "runner = DockerRunner()\n"
        "try:\n"
        "    runner.prepare(['true'], p, cwd=str(ws), env={})\n"
        "    print('prepared')\n"
        "except SandboxUnavailable as exc:\n"
        "    print(exc.reason)\n"
        "print(len(runner._warm))\n"
        "runner.close()\n")
    os.chmod(workspace, 0o755)
    done = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", f"--groups={docker_gid}", python,
                           "-c", script, str(workspace)], capture_output=True, text=True, timeout=120, check=False,
                          cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": "/"})
    assert done.returncode == 0, done.stderr[-2000:]
    reason, made = done.stdout.strip().splitlines()
    assert reason.startswith("docker limits the network to named hosts only when dsh-sandbox runs as root"), reason
    assert "--runner bwrap" in reason and made == "0"
