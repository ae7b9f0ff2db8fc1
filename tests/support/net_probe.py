"""A command that tries every way out of a network limited to the allowlist proxy, and its host side.

The scenarios run as root and as nobody, in an interpreter of their own (nobody
cannot import the checkout's tests): ``HOST`` is Python source that starts a
loopback HTTP server on the host (``port``) and defines the test ``resolver``
(``allowed.test`` is that server, nothing else resolves); ``PROBE`` (defined
by ``HOST``) is the source of the command, run in the sandbox with the port
as its argument, which prints what each attempt gave as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.support.runners import nobody_python

HOST = r"""
import http.server, json, os, shutil, subprocess, sys, threading

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
try:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
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


"""


def check_probe(probe: dict[str, Any]) -> None:
    """Only the proxy, and through it only the allowed name."""
    assert probe["allowed"] == "hello from the host", probe  # through the proxy, to the host's loopback
    assert probe["denied"] == 403, probe
    assert probe["direct"] == 111, probe  # ECONNREFUSED: its own loopback, where nothing listens
    assert probe["udp"] == 101, probe  # ENETUNREACH: no route but loopback
    assert probe["dns"] == "failed", probe
    assert probe["squat"] == 98, probe  # EADDRINUSE: the proxy's port cannot be taken
    assert probe["ns_fds"] == [], probe


def run_scenario(scenario: str, *, as_nobody: bool, groups: tuple[int, ...] = ()) -> dict[str, Any]:
    """Run ``scenario`` (``HOST`` and what follows it, printing one JSON line
    last) as root or as nobody (with ``groups`` as its only supplementary
    groups); its JSON.  Skips where that cannot run."""
    for tool in ("bwrap",):
        if shutil.which(tool) is None:
            pytest.skip(f"SANDBOX_UNAVAILABLE: {tool} is not installed")
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as root and as nobody needs root")
    if as_nobody:
        python = nobody_python()
        if python is None:
            pytest.skip("SANDBOX_UNAVAILABLE: DSH_NOBODY_PYTHON is not set (an interpreter nobody can run)")
        membership = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", *membership, python]
        env = {"PATH": "/usr/bin:/bin", "HOME": "/"}
    else:
        argv, env = [sys.executable], dict(os.environ)
    ran = subprocess.run([*argv, "-P", "-c", scenario], capture_output=True, text=True, timeout=180, check=False,
                         cwd="/", env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    result: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return result
