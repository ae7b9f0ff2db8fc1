"""bwrap with the network limited to named hosts (``SandboxPolicy.network_allowlist``).

The command, in the full bwrap sandbox (its mounts, its syscall filter), reaches
the host's allowlist proxy and nothing else: the allowed name works through
the proxy variables, a denied one gets 403 and is recorded, and the host's
loopback, UDP and DNS stay out of reach.  As root and as nobody.  A runner that
cannot limit by name refuses such a policy: it never runs with the network off or on instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.runners.fake import FakeRunner
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_rules import parse
from dsh.sandbox.policy import SandboxPolicy

from tests.support.net_probe import HOST, check_probe, run_scenario
from tests.support.require import require_runner

SCENARIO = HOST + r"""
import tempfile
from pathlib import Path
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_rules import parse
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-allowlist-", dir="/var/tmp")).resolve()
rules = parse(["allowed.test"], allow_private_for=["allowed.test"])
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,), network_allowlist=rules)
runner = BwrapRunner(proxy_resolver=resolver)
python = os.path.realpath(sys.executable)
results = []
for _ in range(2):  # the second command enters the same namespace
    launch = runner.prepare((python, "-I", "-S", "-c", PROBE, str(port)), policy, cwd=str(ws),
                            env={"PATH": "/usr/bin:/bin"})

    def start():
        return subprocess.Popen(launch.argv, pass_fds=launch.pass_fds, env=launch.spawn_env, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    proc = launch.spawn_in(start)
    out, err = proc.communicate(timeout=120)
    launch.cleanup()
    results.append((proc.returncode, out, err))
refused = [runner.network_mark(policy), list(runner.network_refused(policy, 0))]
explained = runner.explain(policy).network
runner.close()
server.shutdown()
shutil.rmtree(ws)
status, out, err = results[-1]
print(json.dumps({"status": status, "stderr": err[-2000:], "probe": json.loads(out) if status == 0 else None,
                  "first": results[0][1], "refused": refused, "explained": explained}))
"""


@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_the_command_reaches_only_the_allowed_names_through_the_proxy(as_nobody: bool) -> None:
    require_runner("bwrap")
    result = run_scenario(SCENARIO, as_nobody=as_nobody)
    assert result["status"] == 0, result["stderr"]
    check_probe(result["probe"])
    assert '"allowed": "hello from the host"' in result["first"], result["first"]
    assert result["refused"] == [2, ["denied.test"]]  # one refusal per command, each name said once
    assert result["explained"].startswith("allowlist: only through the host's proxy") and "allowed.test" in \
        result["explained"]


def test_a_runner_that_cannot_limits_by_name_refuses_the_policy(tmp_path: Path) -> None:
    runner = FakeRunner()  # E2B's place: a runner without network_by_name
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=tmp_path, writable_roots=(tmp_path,),
                           network_allowlist=parse(["allowed.test"]))
    with pytest.raises(SandboxUnavailable, match="cannot limit the network to named hosts"):
        runner.prepare(("true",), policy, cwd=str(tmp_path), env={})


def test_network_on_and_an_allowlist_together_is_a_contradiction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=tmp_path, network=True,
                      network_allowlist=parse(["allowed.test"]))


def test_danger_full_access_with_an_allowlist_cannot_be_made(tmp_path: Path) -> None:
    # Through the Python API too, not only the CLI: no runner would wrap it, so
    # the allowlist would be dropped without a word.
    with pytest.raises(ValueError, match=r"danger-full-access runs the command unwrapped.*cannot apply"):
        SandboxPolicy(mode=SandboxMode.DANGER_FULL_ACCESS, workspace=tmp_path, writable_roots=(Path("/"),),
                      network_allowlist=parse(["allowed.test"]))
