"""A network namespace with the allowlist proxy's listener in it (real kernel, real bwrap).

A command in a bwrap sandbox inside that namespace reaches the proxy and,
through it, only the allowed name; the host's loopback, UDP and DNS are out of
its reach, and it holds no descriptor of the namespace.  As root and as an
unprivileged user (the namespace then has a user namespace of its own), from a
process that made itself non-dumpable too (as the Landlock runner leaves it).
"""

from __future__ import annotations

import pytest

from tests.support.net_probe import HOST, check_probe, run_scenario

SCENARIO = HOST + r"""
from dsh.runners.linux.net_namespace import SandboxNetns
from dsh.sandbox.net_proxy import ProxyThread
from dsh.sandbox.net_rules import parse

python = os.path.realpath(sys.executable)
ns = SandboxNetns.create(python)
proxy = ProxyThread(parse(["allowed.test"], allow_private_for=["allowed.test"]), resolver=resolver, sock=ns.listener)
proxy.start()
bwrap = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-user",
         "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--"]
if NON_DUMPABLE:
    # As the Landlock runner leaves a process: its /proc/<pid>/fd is root's then.
    import ctypes
    assert ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
fds = tuple(os.dup(fd) for fd in ns.enter_fds)
argv = [*ns.enter_argv(python, fds), *bwrap, python, "-I", "-S", "-c", PROBE, str(port)]
done = subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **ns.proxy_env()}, capture_output=True, text=True,
                      timeout=120, pass_fds=fds)
for fd in fds:
    os.close(fd)
refused = [r.name for r in proxy.refusals]
proxy.close()
ns.close()
server.shutdown()
print(json.dumps({"status": done.returncode, "stderr": done.stderr[-2000:],
                  "probe": json.loads(done.stdout) if done.returncode == 0 else None, "refused": refused}))
"""


@pytest.mark.parametrize("non_dumpable", [False, True], ids=["dumpable", "non-dumpable"])
@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "nobody"])
def test_the_command_reaches_only_the_proxy(as_nobody: bool, non_dumpable: bool) -> None:
    result = run_scenario(SCENARIO.replace("if NON_DUMPABLE:", f"if {non_dumpable}:"), as_nobody=as_nobody)
    assert result["status"] == 0, result["stderr"]
    check_probe(result["probe"])
    assert result["refused"] == ["denied.test"]
