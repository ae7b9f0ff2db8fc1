"""The network allowlist: a command limited to named hosts reaches them through
the host's proxy, and nothing else.

These scenarios run in a session of their own per cell, whose profile extends
the cell's with ``[network] mode = "allowlist"``, allowing only ``127.0.0.1``
(with private addresses allowed for it: the host's loopback listener is the
only upstream on a machine without internet).  The proxy is found through
``HTTPS_PROXY`` or ``ALL_PROXY``, as pip, npm, git and curl find it.  Each
verdict is the host's: which listener saw a connection (and, for a refused
name, the proxy's 403: a proxy that is missing is no refusal).  A runner that cannot
limit the network by name refuses the session: the scenarios are then
unavailable there, never run with the network off or on instead.
"""

from __future__ import annotations

from dsh.cli.conformance import checks as c
from dsh.cli.conformance.model import Check, Expect, HostEnv, RunOutput, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
OK: dict[str, Expect] = {"read-only": "ok", "workspace-write": "ok"}

#: The allowlist these scenarios run under (the harness writes it into their profile).
ALLOWED = "127.0.0.1"

# A CONNECT through the proxy the environment names, with the credential it
# holds when it holds one, as pip, curl and git send it; prints the proxy's status line.
_CONNECT = (
    "import base64, os, socket, urllib.parse\n"
    "proxy = urllib.parse.urlsplit(os.environ.get('HTTPS_PROXY') or os.environ['https_proxy'])\n"
    "auth = b'Proxy-Authorization: Basic ' + base64.b64encode((proxy.username + ':' + proxy.password).encode()) "
    "+ b'\\r\\n' if proxy.password else b''\n"
    "s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)\n"
    "s.sendall(b'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n' + auth + b'\\r\\n')\n"
    "print(s.recv(200).split(b'\\r\\n')[0].decode())\n"
)
# The same through SOCKS5 (ALL_PROXY), by name: the way non-HTTP clients go
# (user and password, RFC 1929, when the variable holds them).
_SOCKS = (
    "import os, socket, struct, urllib.parse\n"
    "proxy = urllib.parse.urlsplit(os.environ.get('ALL_PROXY') or os.environ['all_proxy'])\n"
    "s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)\n"
    "user, word = (proxy.username or '').encode(), (proxy.password or '').encode()\n"
    "s.sendall(b'\\x05\\x01\\x02' if word else b'\\x05\\x01\\x00')\n"
    "assert s.recv(2) == (b'\\x05\\x02' if word else b'\\x05\\x00')\n"
    "word and s.sendall(bytes([1, len(user)]) + user + bytes([len(word)]) + word)\n"
    "assert not word or s.recv(2) == b'\\x01\\x00'\n"
    "name = b'{name}'\n"
    "s.sendall(b'\\x05\\x01\\x00\\x03' + bytes([len(name)]) + name + struct.pack('>H', {port}))\n"
    "print('reply', s.recv(10)[1])\n"
)


def _py(code: str) -> tuple[str, ...]:
    return ("python3", "-c", code)


def reached(listener: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        n = env.hits(listener)
        if n:
            return None
        tail = (out.stdout[-200:] + out.stderr[-300:]).decode("utf-8", "replace")
        return f"the allowed host's {listener} listener saw no connection; output: {tail!r}"

    return check


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("net-allow-connect", "network-allowlist", "an allowed host is reached through HTTPS_PROXY (CONNECT)",
             _py(_CONNECT.replace("{target}", "127.0.0.1:{tcp}")), OK, allowlist=True,
             check_ok=c.all_of(reached("tcp"), c.stdout_has("HTTP/1.1 200")), requires=("python3",)),
    Scenario("net-allow-socks", "network-allowlist", "an allowed host is reached through ALL_PROXY (SOCKS5)",
             _py(_SOCKS.replace("{name}", "127.0.0.1").replace("{port}", "{tcp}")), OK, allowlist=True,
             check_ok=c.all_of(reached("tcp"), c.stdout_has("reply 0")), requires=("python3",)),
    Scenario("net-allow-unlisted-name", "network-allowlist",
             "a name that resolves to the allowed address but is not listed (localhost) is refused",
             _py(_CONNECT.replace("{target}", "localhost:{tcp}")), BLOCKED, allowlist=True,
             check_blocked=c.all_of(c.no_hits("tcp"), c.stdout_has("HTTP/1.1 403")), requires=("python3",)),
    Scenario("net-allow-unlisted-address", "network-allowlist", "an address not listed (::1) is refused",
             _py(_CONNECT.replace("{target}", "[::1]:{tcp6}")), BLOCKED, allowlist=True,
             check_blocked=c.all_of(c.no_hits("tcp6"), c.stdout_has("HTTP/1.1 403")), requires=("python3",)),
    Scenario("net-allow-direct-tcp", "network-allowlist", "TCP straight to the allowed host, skipping the proxy",
             ("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/{tcp} && echo hi >&3"), BLOCKED, allowlist=True,
             check_blocked=c.no_hits("tcp")),
    Scenario("net-allow-udp-dns", "network-allowlist", "UDP and DNS straight to host listeners",
             ("bash", "-c", "for p in {udp} {dns}; do echo hi > /dev/udp/127.0.0.1/$p; done"), BLOCKED,
             allowlist=True, check_blocked=c.all_of(c.no_hits("udp"), c.no_hits("dns"))),
    Scenario("net-allow-abstract-unix", "network-allowlist", "an abstract unix socket of the host",
             _py("import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{abstract}'); s.send(b'hi')"),
             BLOCKED, allowlist=True, check_blocked=c.no_hits("abstract"), requires=("python3",)),
)
