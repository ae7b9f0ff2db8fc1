"""bwrap with an allowlist that carries a secret (``NetworkRules.secrets``).

The real bwrap sandbox, the real proxy, a loopback HTTPS upstream with its own
CA: the command's variable holds a placeholder, its TLS clients trust the
session CA through a read-only bundle, and the proxy puts the value in the
one header of requests to the one host it is for.  Elsewhere the placeholder
is refused, and the value appears in nothing the command can read.  As root
and as nobody.
"""

from __future__ import annotations

import pytest

from tests.support.net_probe import run_scenario
from tests.support.require import require_runner
from tests.support.secret_probe import UPSTREAM, check_secret_result

SCENARIO = UPSTREAM + r"""
import tempfile
from pathlib import Path
from dsh.runners.bwrap import BwrapRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-secrets-", dir="/var/tmp")).resolve()
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,), network_allowlist=rules,
                       env_passthrough=("DSH_TEST_TOKEN",))
runner = BwrapRunner(proxy_resolver=resolver, proxy_upstream_tls=upstream_tls)
python = os.path.realpath(sys.executable)
# The caller's environment holds the value too (a profile passing it through): the placeholder wins.
mark = runner.network_mark(policy)
launch = runner.prepare((python, "-I", "-S", "-c", PROBE, str(https.server_address[1]), str(plain.server_address[1])),
                        policy, cwd=str(ws), env={"PATH": "/usr/bin:/bin", "HOME": str(ws), "DSH_TEST_TOKEN": VALUE})
in_argv = any(VALUE in str(a) for a in launch.argv)
proc = launch.spawn_in(lambda: subprocess.Popen(launch.argv, pass_fds=launch.pass_fds, env=launch.spawn_env,
                                                start_new_session=True, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE))
report = first_line(proc.stdout.readline)
memory = scan_sandbox(report, (proc.pid,), ws)
rest, err = proc.communicate(timeout=120)
out, err = report + rest.decode(), err.decode()
launch.cleanup()
finish(runner, policy, mark, ws, ("/bin/true",),
       {"status": proc.returncode, "stderr": err[-2000:], "probe": json.loads(out) if out else None,
        "value_in_output": VALUE in out + err or in_argv, "memory": memory})
"""


@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_the_proxy_puts_the_value_where_it_belongs_and_the_sandbox_never_sees_it(as_nobody: bool) -> None:
    require_runner("bwrap")
    result = run_scenario(SCENARIO, as_nobody=as_nobody)
    check_secret_result(result)
    refused = result["copy_refused"]
    assert refused is not None and "the variable COPY holds the value of the secret DSH_TEST_TOKEN" in refused
    assert result["value"] not in refused
