"""docker with an allowlist that carries a secret (``NetworkRules.secrets``).

The real daemon and image, the proxy listening in the container's network
namespace, a loopback HTTPS upstream with its own CA: the command's variable
holds a placeholder, the CA bundle is a 0444 file bound read-only, the proxy
puts the value in the one header to the one host, refuses the placeholder
elsewhere, and the value is in nothing the command can read.  As root, and as
nobody in the docker group (the listener taken from a helper).  The bundle
file goes with the container.
"""

from __future__ import annotations

import grp

import pytest

from tests.support.net_probe import run_scenario
from tests.support.require import require_runner
from tests.support.secret_probe import UPSTREAM, check_secret_result

SCENARIO = UPSTREAM + r"""
import tempfile
from pathlib import Path
from dsh.runners.docker import DockerRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-secrets-", dir="/var/tmp")).resolve()
ws.chmod(0o755)
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,), network_allowlist=rules,
                       env_passthrough=("DSH_TEST_TOKEN",))
runner = DockerRunner(proxy_resolver=resolver, proxy_upstream_tls=upstream_tls)
# The caller's environment holds the value too (a profile passing it through): the placeholder wins.
mark = runner.network_mark(policy)
launch = runner.prepare(("python3", "-I", "-S", "-c", PROBE, str(https.server_address[1]),
                         str(plain.server_address[1])), policy, cwd=str(ws),
                        env={"PATH": "/usr/bin:/bin", "HOME": str(ws), "DSH_TEST_TOKEN": VALUE})
proc = launch.start(None, None)
report = first_line(lambda: os.read(proc.stdout_fd, 65536))
memory = scan_sandbox(report, (), ws)
out = report + b"".join(iter(lambda: os.read(proc.stdout_fd, 65536), b"")).decode()
err = b"".join(iter(lambda: os.read(proc.stderr_fd, 65536), b"")).decode()
status = proc.wait(120)
proc.close()
warm = next(iter(runner._warm.values()))
bundle = str(warm.secrets.bundle)
bundle_mode = oct(os.stat(bundle).st_mode & 0o7777)
inspected = json.dumps(runner._docker().api.inspect_container(warm.id))
finish(runner, policy, mark, ws, ("true",),
       {"status": status.exit_code, "stderr": err[-2000:], "probe": json.loads(out) if out else None,
        "value_in_output": VALUE in out + err + inspected, "bundle_mode": bundle_mode, "memory": memory},
       late=lambda: {"bundle_left": os.path.exists(bundle)})
"""


def check(result: dict[str, object]) -> None:
    check_secret_result(result)
    refused = result["copy_refused"]
    assert isinstance(refused, str) and "the variable COPY holds the value of the secret DSH_TEST_TOKEN" in refused
    assert result["bundle_mode"] == "0o444" and result["bundle_left"] is False


def test_the_proxy_puts_the_value_where_it_belongs_as_root() -> None:
    require_runner("docker")
    check(run_scenario(SCENARIO, as_nobody=False))


def test_the_proxy_puts_the_value_where_it_belongs_as_a_docker_group_member() -> None:
    require_runner("docker")
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        pytest.skip("SANDBOX_UNAVAILABLE: no docker group to run nobody in")
    check(run_scenario(SCENARIO, as_nobody=True, groups=(docker_gid,)))
