"""A network namespace with the allowlist proxy's listener in it (real kernel, real bwrap).

A command in a bwrap sandbox inside that namespace reaches the proxy and,
through it, only the allowed name; the host's loopback, UDP and DNS are out of
its reach, and it holds no descriptor of the namespace.  As root and as an
unprivileged user (the namespace then has a user namespace of its own).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.runners import nobody_python

SCENARIO = r"""
import http.server, json, os, shutil, subprocess, sys, threading
from dsh.runners.linux.net_namespace import SandboxNetns
from dsh.sandbox.net_proxy import ProxyThread
from dsh.sandbox.net_rules import parse

PROBE = '''
import json, os, socket, sys, urllib.error, urllib.request
port, out = int(sys.argv[1]), {}
try:
    out["allowed"] = urllib.request.urlopen(f"http://allowed.test:{port}/", timeout=20).read().decode()
except Exception as exc:
    out["allowed"] = repr(exc)
try:
    urllib.request.urlopen(f"http://denied.test:{port}/", timeout=20)
    out["denied"] = "reached"
except urllib.error.HTTPError as exc:
    out["denied"] = exc.code
except Exception as exc:
    out["denied"] = repr(exc)
direct = socket.socket()
direct.settimeout(5)
try:
    direct.connect(("127.0.0.1", port))
    out["direct"] = "connected"
except OSError as exc:
    out["direct"] = exc.errno
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    udp.sendto(b"x", ("192.0.2.1", 53))
    out["udp"] = "sent"
except OSError as exc:
    out["udp"] = exc.errno
try:
    socket.getaddrinfo("allowed.test", 80)
    out["dns"] = "resolved"
except OSError:
    out["dns"] = "failed"
squat = socket.socket()
try:
    squat.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    squat.bind(("127.0.0.1", 3128))
    out["squat"] = "bound"
except OSError as exc:
    out["squat"] = exc.errno
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass  # the listing's own descriptor, closed by now
out["ns_fds"] = [link for link in links if link.split(":")[0] in ("net", "user")]
print(json.dumps(out))
'''


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]


async def resolver(name, _port):
    return ["127.0.0.1"] if name == "allowed.test" else []


python = os.path.realpath(sys.executable)
ns = SandboxNetns.create(python)
proxy = ProxyThread(parse(["allowed.test"], allow_private_for=["allowed.test"]), resolver=resolver, sock=ns.listener)
proxy.start()
bwrap = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-user",
         "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--"]
argv = [*ns.enter_argv(shutil.which("nsenter")), *bwrap, python, "-I", "-S", "-c", PROBE, str(port)]
done = subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **ns.proxy_env()}, capture_output=True, text=True,
                      timeout=120)
refused = [r.name for r in proxy.refusals]
proxy.close()
ns.close()
server.shutdown()
print(json.dumps({"status": done.returncode, "stderr": done.stderr[-2000:],
                  "probe": json.loads(done.stdout) if done.returncode == 0 else None, "refused": refused}))
"""


def _check(ran: subprocess.CompletedProcess[str]) -> None:
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["status"] == 0, result["stderr"]
    probe = result["probe"]
    assert probe["allowed"] == "hello from the host", probe  # through the proxy, to the host's loopback
    assert probe["denied"] == 403, probe
    assert result["refused"] == ["denied.test"]
    assert probe["direct"] == 111, probe  # ECONNREFUSED: its own loopback, where nothing listens
    assert probe["udp"] == 101, probe  # ENETUNREACH: no route but loopback
    assert probe["dns"] == "failed", probe
    assert probe["squat"] == 98, probe  # EADDRINUSE: the proxy's port cannot be taken
    assert probe["ns_fds"] == [], probe


def _needs() -> None:
    for tool in ("bwrap", "nsenter"):
        if shutil.which(tool) is None:
            pytest.skip(f"SANDBOX_UNAVAILABLE: {tool} is not installed")


def test_the_command_reaches_only_the_proxy_as_root() -> None:
    _needs()
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: the root case needs root")
    _check(subprocess.run([sys.executable, "-P", "-c", SCENARIO], capture_output=True, text=True, timeout=180,
                          check=False))


def test_the_command_reaches_only_the_proxy_as_an_unprivileged_user(tmp_path: Path) -> None:
    _needs()
    python = nobody_python()
    if os.geteuid() != 0 or python is None:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root and DSH_NOBODY_PYTHON")
    _check(subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python, "-P", "-c",
                           SCENARIO], capture_output=True, text=True, timeout=180, check=False, cwd="/",
                          env={"PATH": "/usr/bin:/bin", "HOME": "/"}))
