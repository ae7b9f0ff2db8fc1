"""Landlock with an allowlist that carries a secret (``NetworkRules.secrets``).

The real kernel, the real proxy on the host's loopback, a loopback HTTPS
upstream with its own CA: the command's variable holds a placeholder, its TLS
clients trust the session CA through a 0444 bundle outside every writable root,
and the proxy puts the value in the one header of requests to the one host it
is for.  Elsewhere the placeholder is refused, and the value appears in nothing
the command can read: not its environment, not any process's it can see (the
host's are outside its Landlock domain), not a file.  As root and as nobody.
"""

from __future__ import annotations

import pytest

from tests.support.net_probe import run_scenario
from tests.support.require import require_runner
from tests.support.secret_probe import UPSTREAM, check_secret_result

SCENARIO = UPSTREAM + r"""
import tempfile, urllib.parse
from pathlib import Path
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-secrets-", dir="/var/tmp")).resolve()
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,), network_allowlist=rules,
                       env_passthrough=("DSH_TEST_TOKEN",), accept_degraded=tuple(LandlockRunner.DEGRADATIONS))
runner = LandlockRunner(proxy_resolver=resolver, proxy_upstream_tls=upstream_tls)
python = os.path.realpath(sys.executable)
# The caller's environment holds the value too (a profile passing it through): the placeholder wins,
# as the executor merges them: the caller's, then the runner's.
caller = {"PATH": "/usr/bin:/bin", "HOME": str(ws), "DSH_TEST_TOKEN": VALUE}
mark = runner.network_mark(policy)
launch = runner.prepare((python, "-I", "-S", "-c", PROBE, str(https.server_address[1]), str(plain.server_address[1])),
                        policy, cwd=str(ws), env=caller)
in_argv = any(VALUE in str(a) for a in launch.argv)
bundle_dir = os.path.dirname(launch.env["SSL_CERT_FILE"])


def start():
    env = dict(launch.spawn_env) if launch.spawn_env is not None else {**caller, **launch.env}
    return subprocess.Popen(launch.argv, pass_fds=launch.pass_fds, env=env, cwd=str(ws), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


proc = launch.spawn_in(start) if launch.spawn_in else start()
# Another user, on the same host's loopback, with what it can see (the port, the public bundle, a
# placeholder shown in a command line): the proxy asks it for the credential it cannot read.
OTHER = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=10)\n"
    "s.sendall(b'CONNECT api.example.test:' + sys.argv[2].encode() + b' HTTP/1.1\\r\\n\\r\\n')\n"
    "print(s.recv(100).split(b'\\r\\n')[0].decode())\n"
)
proxy_port = str(urllib.parse.urlsplit(launch.env["HTTPS_PROXY"]).port)
# As nobody, a process of the same user that was not handed the credential stands in.
other_uid = ["setpriv", "--reuid=65533", "--regid=65533", "--clear-groups"] if os.geteuid() == 0 else []
other = subprocess.run([*other_uid, python, "-I", "-S", "-c", OTHER, proxy_port, str(https.server_address[1])],
                       capture_output=True, text=True, timeout=60)
other_user = other.stdout.strip() or other.stderr[-300:]
report = first_line(proc.stdout.readline)
memory = scan_sandbox(report, (proc.pid,), ws)
rest, err = proc.communicate(timeout=120)
out, err = report + rest.decode(), err.decode()
if launch.cleanup:
    launch.cleanup()
finish(runner, policy, mark, ws, ("/bin/true",),
       {"status": proc.returncode, "stderr": err[-2000:], "probe": json.loads(out) if out else None,
        "value_in_output": VALUE in out + err or in_argv, "memory": memory, "other_user": other_user},
       late=lambda: {"bundle_removed": not os.path.exists(bundle_dir)})  # the bundle goes with the runner
"""


@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_the_proxy_puts_the_value_where_it_belongs_and_the_sandbox_never_sees_it(as_nobody: bool) -> None:
    require_runner("landlock")
    result = run_scenario(SCENARIO, as_nobody=as_nobody)
    check_secret_result(result)
    refused = result["copy_refused"]
    assert refused is not None and "the variable COPY holds the value of the secret DSH_TEST_TOKEN" in refused
    assert result["value"] not in refused
    assert result["bundle_removed"] is True  # the bundle goes with the runner
    # The proxy on the host's loopback serves this session's command only.
    assert result["other_user"] == "HTTP/1.1 407 Proxy Authentication Required", result["other_user"]
