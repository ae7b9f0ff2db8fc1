"""A secret behind the allowlist proxy, end to end: the host side and the command.

``UPSTREAM`` is Python source (run as root or as nobody, like ``net_probe``'s
scenarios) that starts a loopback HTTPS server with a CA of its own as
``api.example.test`` (recording what each request carried), a plain HTTP
server as ``other.example.test``, the proxy's ``resolver`` for both names, the
``upstream_tls`` context that trusts that CA, and ``rules`` with the secret
``DSH_TEST_TOKEN`` for ``api.example.test``, whose value ``VALUE`` is set in
this process's environment only.  ``PROBE`` is the command's source: it sends
the placeholder where it belongs and where it does not, then dumps every
environment, command line and file of its own it can see, so that the host
side can look for the value (the command never learns it to look for it).
"""

from __future__ import annotations

from typing import Any

UPSTREAM = r"""
import dataclasses, http.server, json, os, shutil, ssl, subprocess, sys, threading
from dsh.sandbox.net_rules import parse
from dsh.sandbox.net_secrets import SessionCA, parse_secret

VALUE = "ghp-the-real-value-" + os.urandom(8).hex()
os.environ["DSH_TEST_TOKEN"] = VALUE
received = []


class Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        received.append({"server": self.server.name, "path": self.path, "authorization":
                         self.headers.get("Authorization"), "x_other": self.headers.get("X-Other")})
        body = b"ok from " + self.server.name.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(name, context=None):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.name = name
    if context is not None:
        # The handshake in each connection's own thread, with a deadline: done
        # in accept(), one client that never finishes it would stall every other.
        plain_finish = server.finish_request

        def finish_request(request, client_address):
            request.settimeout(30)
            plain_finish(context.wrap_socket(request, server_side=True), client_address)

        server.finish_request = finish_request
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


upstream_ca = SessionCA()  # the upstream's own CA: the proxy trusts it, the command does not
https = serve("api.example.test", upstream_ca.server_context("api.example.test"))
plain = serve("other.example.test")
upstream_tls = ssl.create_default_context(cadata=upstream_ca.certificate_pem().decode())


async def resolver(name, _port):
    return ["127.0.0.1"] if name in ("api.example.test", "other.example.test") else []


rules = parse(["api.example.test", "other.example.test"],
              allow_private_for=["api.example.test", "other.example.test"])
rules = dataclasses.replace(rules, secrets=(parse_secret(rules, "DSH_TEST_TOKEN", ["api.example.test"]),))

PROBE = '''
import json, os, stat, sys, time, urllib.error, urllib.request
https_port, http_port, out, cwd = int(sys.argv[1]), int(sys.argv[2]), {}, os.getcwd()
token = os.environ.get("DSH_TEST_TOKEN", "")
out["placeholder"] = token


def get(url, headers):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code
    except Exception as exc:
        return repr(exc)


api = f"https://api.example.test:{https_port}"
out["secret"] = get(f"{api}/secret", {"Authorization": f"Bearer {token}"})
out["other_header"] = get(f"{api}/other-header", {"X-Other": token})
out["other_host"] = get(f"http://other.example.test:{http_port}/other-host", {"Authorization": f"Bearer {token}"})
out["no_placeholder"] = get(f"http://other.example.test:{http_port}/plain", {})
seen = {}
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self", "thread-self"]:
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as file:
                seen[f"/proc/{pid}/{name}"] = file.read().decode("latin-1")
        except OSError:
            pass
for top in ("/dev/dsh-sandbox", os.path.dirname(os.environ.get("SSL_CERT_FILE", "/nonexistent")), os.getcwd(), "/tmp",
            os.environ.get("HOME", "/nonexistent")):
    for root, _dirs, files in os.walk(top):
        for name in files:
            try:
                # Regular files only, opened without blocking: a named pipe another
                # program left in a shared /tmp would wait for a writer forever.
                fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
                with open(fd, "rb") as file:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        seen[os.path.join(root, name)] = file.read(1 << 20).decode("latin-1")
            except OSError:
                pass
out["seen"] = seen
out["ca_vars"] = {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                                 "NODE_EXTRA_CA_CERTS", "PIP_CERT", "GIT_SSL_CAINFO")}
bundle = os.environ.get("SSL_CERT_FILE", "")
out["bundle_mode"] = oct(os.stat(bundle).st_mode & 0o7777) if bundle else None
try:
    open(bundle, "ab").close()
    out["bundle_write"] = "written"
except OSError as exc:
    out["bundle_write"] = exc.errno
print(json.dumps(out), flush=True)
# Alive until the host has scanned the memory of the sandbox's processes.
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(cwd, "scanned")) and time.monotonic() < deadline:
    time.sleep(0.02)
'''


def first_line(read):
    # The probe's report, read with read() (bytes, empty at the end) up to its newline.
    data = b""
    while b"\n" not in data:
        chunk = read()
        if not chunk:
            break
        data += chunk
    return data.decode()


def scan_sandbox(report, roots, ws):
    # Look for the value in the memory of every process of the sandbox while
    # the probe waits: the processes whose environment holds the placeholder,
    # and the descendants of those and of roots (host pids: the runner's
    # process).  The placeholder, found in the same memory, shows that the
    # scan reads what the command holds.  Then the probe may exit.
    memory = {"pids": [], "unreadable": {}, "value_in": [], "placeholder_in": [], "bytes": 0}
    try:
        placeholder = json.loads(report)["placeholder"].encode()
    except (ValueError, KeyError, AttributeError):
        placeholder = b""
    if placeholder:
        parent, marked = {}, set()
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/stat", "rb") as file:
                    parent[int(entry)] = int(file.read().rsplit(b")", 1)[1].split()[1])
                with open(f"/proc/{entry}/environ", "rb") as file:
                    if placeholder in file.read():
                        marked.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
        found, grew = marked | set(roots), True
        while grew:
            more = {pid for pid, ppid in parent.items() if ppid in found} - found
            grew = bool(more)
            found |= more
        needle = VALUE.encode()
        for pid in sorted(found - {os.getpid()}):
            try:
                with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                    regions = [line.split() for line in maps]
                    for region in regions:
                        if "r" not in region[1] or region[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                            continue
                        start, end = (int(x, 16) for x in region[0].split("-"))
                        try:
                            mem.seek(start)
                            data = mem.read(end - start)
                        except OSError:
                            continue
                        memory["bytes"] += len(data)
                        if needle in data and pid not in memory["value_in"]:
                            memory["value_in"].append(pid)
                        if placeholder in data and pid not in memory["placeholder_in"]:
                            memory["placeholder_in"].append(pid)
                memory["pids"].append(pid)
            except OSError as exc:
                memory["unreadable"][pid] = exc.errno
    (ws / "scanned").touch()
    return memory


def finish(runner, policy, mark, ws, copy_argv, report, late=dict):
    # The end every scenario shares: the hosts the proxy refused, a copy of
    # the value under another name (refused, nothing runs), the runner closed,
    # the servers shut down, and the report printed: ``report``, the common
    # fields and what ``late()`` says once the runner is closed.
    refused_hosts = runner.network_refused(policy, mark)
    try:
        runner.prepare(copy_argv, policy, cwd=str(ws), env={"PATH": "/usr/bin:/bin", "COPY": "x" + VALUE})
        copy_refused = None
    except Exception as exc:
        copy_refused = str(exc)
    runner.close()
    after = late()
    https.shutdown()
    plain.shutdown()
    shutil.rmtree(ws)
    print(json.dumps({**report, **after, "received": received, "value": VALUE, "copy_refused": copy_refused,
                      "refused_hosts": refused_hosts}))
"""


def check_secret_result(result: dict[str, Any]) -> None:
    """What the host side reports after the probe ran (see ``UPSTREAM``)."""
    assert result["status"] == 0, result["stderr"]
    probe = result["probe"]
    value = result["value"]
    placeholder = probe["placeholder"]
    assert placeholder.startswith("dsh-secret-") and placeholder != value
    # The one request where the placeholder belongs reached the upstream with the value.
    assert probe["secret"] == "ok from api.example.test", probe["secret"]
    by_path = {r["path"]: r for r in result["received"]}
    assert by_path["/secret"]["authorization"] == f"Bearer {value}"
    # Anywhere else it is refused by the proxy and reaches no upstream.
    assert probe["other_header"] == 403 and "/other-header" not in by_path
    assert probe["other_host"] == 403 and "/other-host" not in by_path
    assert probe["no_placeholder"] == "ok from other.example.test"  # the allowlist itself still works
    assert set(by_path) == {"/secret", "/plain"}
    # Both refusals are reported, under the hosts they were sent to.
    assert result["refused_hosts"] == ["api.example.test", "other.example.test"], result["refused_hosts"]
    # The value is nowhere the command could look; the placeholder is where it should be.
    assert probe["seen"], probe
    leaked = [where for where, text in probe["seen"].items() if value in text]
    assert leaked == []
    assert any(placeholder in text for where, text in probe["seen"].items() if where.endswith("/environ"))
    assert result["value_in_output"] is False
    # Nor in the memory of the sandbox's processes, where the placeholder is.
    memory = result["memory"]
    assert memory["pids"] and memory["placeholder_in"] and memory["bytes"] > 0, memory
    assert memory["value_in"] == [] and memory["unreadable"] == {}, memory
    bundle = probe["ca_vars"]["SSL_CERT_FILE"]
    assert set(probe["ca_vars"].values()) == {bundle}
    assert "-----BEGIN CERTIFICATE-----" in probe["seen"][bundle]
    assert probe["bundle_mode"] == "0o444" and probe["bundle_write"] in (13, 30)  # EACCES, EROFS
