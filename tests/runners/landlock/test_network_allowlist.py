"""Landlock with the network limited to named hosts (``SandboxPolicy.network_allowlist``).

The command shares the host's network: the allowlist's proxy listens on the
host's loopback, seccomp leaves it TCP sockets only, and Landlock lets it
connect() to the proxy's port only.  The allowed name works through the proxy
variables, a denied one gets 403 and is recorded; TCP straight to the host's
server, UDP, DNS, bind(), listen() (which would bind a port on every address)
and TCP Fast Open stay refused.  What Landlock cannot do (limit by address) is
a degradation the policy must accept, and the probe shows it: another address
at the proxy's port is not refused by the sandbox.  As root and as nobody.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_rules import parse
from dsh.sandbox.policy import SandboxPolicy

from tests.support.net_probe import HOST, run_scenario
from tests.support.require import require_runner

# What Landlock adds to the shared probe: the ways a command sharing the host's
# network could get past a port rule.
EXTRA = r'''
import errno, json, os, socket, sys, urllib.parse
port, out = int(sys.argv[1]), {}
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"]).port
def attempt(name, call):
    try:
        out[name] = call()
    except OSError as exc:
        out[name] = exc.errno
def listen():
    s = socket.socket()
    s.listen()
    return list(s.getsockname())
attempt("listen", listen)
attempt("fastopen", lambda: socket.socket().sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", port)))
attempt("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP) and "made")
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) and "made")
attempt("unix", lambda: socket.socket(socket.AF_UNIX) and "made")
# The degradation: Landlock names a port, never an address.
attempt("proxy_port_elsewhere", lambda: socket.create_connection(("127.0.0.2", proxy), timeout=5) and "connected")
print(json.dumps(out))
'''

SCENARIO = HOST + "EXTRA = " + repr(EXTRA) + r"""
import tempfile
from pathlib import Path
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_rules import parse
from dsh.sandbox.policy import SandboxPolicy

ws = Path(tempfile.mkdtemp(prefix="dsh-allowlist-", dir="/var/tmp")).resolve()
rules = parse(["allowed.test"], allow_private_for=["allowed.test"])
policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,), network_allowlist=rules,
                       accept_degraded=tuple(LandlockRunner.DEGRADATIONS))
runner = LandlockRunner(proxy_resolver=resolver)
python = os.path.realpath(sys.executable)
results = []
for source in (PROBE, PROBE, EXTRA):  # the second command uses the same proxy
    launch = runner.prepare((python, "-I", "-S", "-c", source, str(port)), policy, cwd=str(ws),
                            env={"PATH": "/usr/bin:/bin"})

    def start():
        return subprocess.Popen(launch.argv, pass_fds=launch.pass_fds, env={"PATH": "/usr/bin:/bin", **launch.env},
                                start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    proc = launch.spawn_in(start) if launch.spawn_in else start()
    out, err = proc.communicate(timeout=120)
    if launch.cleanup:
        launch.cleanup()
    results.append((proc.returncode, out, err))
refused = [runner.network_mark(policy), list(runner.network_refused(policy, 0))]
explained = runner.explain(policy).network
gaps = [g.degradation for g in runner.enforcement(policy).gaps]
runner.close()
server.shutdown()
shutil.rmtree(ws)
print(json.dumps({"results": results, "refused": refused, "explained": explained, "gaps": gaps}))
"""


@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_the_command_reaches_only_the_proxy_port_and_through_it_only_the_allowed_names(as_nobody: bool) -> None:
    require_runner("landlock")
    result = run_scenario(SCENARIO, as_nobody=as_nobody)
    for status, _, err in result["results"]:
        assert status == 0, err
    import json

    probe = json.loads(result["results"][1][1])
    assert probe["allowed"] == "hello from the host", probe  # through the proxy, to the host's loopback
    assert probe["denied"] == 403, probe
    assert probe["direct"] == 13, probe  # EACCES: Landlock, the server's port is not the proxy's
    assert probe["udp"] == 13, probe  # EACCES: seccomp, TCP sockets only
    assert probe["dns"] == "failed", probe
    assert probe["squat"] == 13, probe  # EACCES: no bind()
    assert probe["ns_fds"] == [], probe
    extra = json.loads(result["results"][2][1])
    assert extra["listen"] == 13, extra  # not a port bound on every address of the host
    assert extra["fastopen"] == 13, extra
    assert extra["sctp"] == 13 and extra["raw"] == 13 and extra["unix"] == 13, extra
    # The accepted degradation, as it is: the sandbox lets a connect() to another
    # address at the proxy's port through (nothing listens there: refused by the host).
    assert extra["proxy_port_elsewhere"] == 111, extra
    assert result["refused"] == [2, ["denied.test"]]  # one refusal per command, each name said once
    assert result["explained"].startswith("allowlist: only through the host's proxy at 127.0.0.1 on a port") \
        and "allowed.test" in result["explained"]
    assert "landlock-network-by-port" in result["gaps"]


def test_the_allowlist_is_refused_unless_its_degradation_is_accepted(tmp_path: Path) -> None:
    runner = LandlockRunner()
    require_runner("landlock", runner)
    others = tuple(d for d in LandlockRunner.DEGRADATIONS if d != "landlock-network-by-port")
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=tmp_path, writable_roots=(tmp_path,),
                           network_allowlist=parse(["allowed.test"]), accept_degraded=others)
    try:
        with pytest.raises(SandboxUnavailable, match="landlock-network-by-port"):
            runner.prepare(("true",), policy, cwd=str(tmp_path), env={})
        assert runner.network_mark(policy) == 0  # refused before any proxy was made
    finally:
        runner.close()
