"""docker with the network limited to named hosts (``SandboxPolicy.network_allowlist``).

The container keeps ``network_mode=none``; the host's allowlist proxy listens
inside its network namespace.  The command reaches the proxy and nothing else:
the allowed name works through the proxy variables, a denied one gets 403 and
is reported, and the host's loopback, UDP and DNS stay out of reach.  As root
the host enters the container's namespace; as a member of the docker group a
helper in the container makes the listener and the host takes it.
"""

from __future__ import annotations

import grp
import json
import os
from pathlib import Path
from typing import Any

import pytest
from dsh.runners.docker import DockerRunner
from dsh.sandbox.net_rules import parse

from tests.runners.docker.helpers import policy, run
from tests.support.net_probe import HOST, check_probe, run_scenario
from tests.support.require import require_runner


def test_the_command_reaches_only_the_allowed_names_through_the_proxy(
        workspace: Path, probe_host: dict[str, Any]) -> None:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: entering the container's network namespace needs root")
    runner = DockerRunner(proxy_resolver=probe_host["resolver"])
    require_runner("docker", runner)
    rules = parse(["allowed.test"], allow_private_for=["allowed.test"])
    limited = policy(workspace, network_allowlist=rules)
    try:
        first = run(runner, ["python3", "-I", "-S", "-c", probe_host["PROBE"], str(probe_host["port"])], limited)
        mark = runner.network_mark(limited)
        second = run(runner, ["python3", "-I", "-S", "-c", probe_host["PROBE"], str(probe_host["port"])], limited)
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


SCENARIO = HOST + r"""
import tempfile
from pathlib import Path
from dsh.runners.docker import DockerRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_rules import parse
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-allowlist-", dir="/var/tmp")).resolve()
rules = parse(["allowed.test"], allow_private_for=["allowed.test"])
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,), network_allowlist=rules)
runner = DockerRunner(proxy_resolver=resolver)
launch = runner.prepare(("python3", "-I", "-S", "-c", PROBE, str(port)), policy, cwd=str(ws),
                        env={"PATH": "/usr/bin:/bin"})
proc = launch.start(None, None)
out = b"".join(iter(lambda: os.read(proc.stdout_fd, 65536), b""))
err = b"".join(iter(lambda: os.read(proc.stderr_fd, 65536), b""))
status = proc.wait(120)
proc.close()
top = runner._docker().api.top(next(iter(runner._warm.values())).id)
helpers = "\n".join(" ".join(row) for row in top["Processes"])
runner.close()
server.shutdown()
shutil.rmtree(ws)
print(json.dumps({"status": status.exit_code, "stderr": err.decode()[-2000:], "helpers": helpers,
                  "probe": json.loads(out) if status.exit_code == 0 else None}))
"""


def test_as_a_docker_group_member_the_listener_is_taken_from_a_helper() -> None:
    """Not root: the runner cannot enter the daemon's namespaces, so a helper in
    the container (the caller's own uid) makes the listener and the host takes
    it with pidfd_getfd.  The command sees exactly what it sees as root, and the
    helper is gone before it runs."""
    require_runner("docker")
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        pytest.skip("SANDBOX_UNAVAILABLE: no docker group to run nobody in")
    result = run_scenario(SCENARIO, as_nobody=True, groups=(docker_gid,))
    assert result["status"] == 0, result["stderr"]
    check_probe(result["probe"])
    # The container's processes once the command ended: the keep-alive, and no helper.
    assert "sleep 86400" in result["helpers"], result["helpers"]
    assert "time.sleep" not in result["helpers"] and "python3" not in result["helpers"], result["helpers"]
