"""Secrets kept out of the sandbox, the pieces without a network (``sandbox/net_secrets.py``):
rules are validated, the command gets a placeholder and never the value, a
request head gets the value only in the header its rule names and only for
its hosts, a placeholder anywhere else refuses the request, and the session's
CA signs a certificate a client that trusts its bundle accepts."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.net_rules import parse
from dsh.sandbox.net_secrets import Secrets, SessionCA, parse_secret, values_in

RULES = parse(["api.example.com", "*.forge.test", "other.test"])
TOKEN = "ghp_realvalue123"


def secrets(header: str = "Authorization") -> Secrets:
    rule = parse_secret(RULES, "GITHUB_TOKEN", ["API.example.com."], header)
    return Secrets([rule], {"GITHUB_TOKEN": TOKEN})


@pytest.mark.parametrize(("env", "hosts", "header", "says"), [
    ("GITHUB-TOKEN", ["api.example.com"], "Authorization", "not a variable name"),
    ("T", [], "Authorization", "write hosts"),
    ("T", "api.example.com", "Authorization", "write hosts"),
    ("T", ["unlisted.test"], "Authorization", "not in network.allow"),
    ("T", ["api.example.com"], "Bad Header", "not a header name"),
    ("T", ["api.example.com"], "X:Y", "not a header name"),
    # Variables the command or the sandbox needs: a placeholder there breaks it or its routing.
    ("PATH", ["api.example.com"], "Authorization", "PATH is a variable the command or the sandbox needs"),
    ("SSL_CERT_FILE", ["api.example.com"], "Authorization", "SSL_CERT_FILE is a variable the command"),
    ("https_proxy", ["api.example.com"], "Authorization", "https_proxy is a variable the command"),
    ("LD_PRELOAD", ["api.example.com"], "Authorization", "LD_PRELOAD is a variable the command"),
    # Headers that route or frame the request.
    ("T", ["api.example.com"], "Host", "Host routes or frames the request, not a credential"),
    ("T", ["api.example.com"], "content-length", "routes or frames the request"),
    ("T", ["api.example.com"], "X-Forwarded-Host", "routes or frames the request"),
    ("T", ["api.example.com"], "Proxy-Authorization", "routes or frames the request"),
])
def test_bad_rules_name_the_field_and_the_fix(env: str, hosts: object, header: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_secret(RULES, env, hosts, header)


def test_a_host_below_an_allowed_wildcard_may_be_named() -> None:
    assert parse_secret(RULES, "T", ["git.forge.test"]).hosts == ("git.forge.test",)


def test_a_missing_or_multiline_value_is_refused() -> None:
    rule = parse_secret(RULES, "T", ["api.example.com"])
    with pytest.raises(ConfigError, match="T is not set"):
        Secrets([rule], {})
    with pytest.raises(ConfigError, match="line break"):
        Secrets([rule], {"T": "a\r\nX-Evil: 1"})


def test_the_command_gets_a_placeholder_never_the_value() -> None:
    env = secrets().environment()
    assert set(env) == {"GITHUB_TOKEN"}
    assert env["GITHUB_TOKEN"].startswith("dsh-secret-") and TOKEN not in env["GITHUB_TOKEN"]
    assert secrets().environment() != env  # a fresh one per session


def test_the_value_goes_only_in_its_header_to_its_hosts() -> None:
    s = secrets()
    placeholder = s.environment()["GITHUB_TOKEN"].encode()
    head = b"GET /user HTTP/1.1\r\nHost: api.example.com\r\nauthorization: Bearer " + placeholder + b"\r\n\r\n"
    rewritten, why = s.rewrite(head, "api.example.com")
    assert why is None and b"authorization: Bearer " + TOKEN.encode() + b"\r\n" in rewritten
    assert placeholder not in rewritten
    # Another allowed host, the same header: refused, and nothing is returned to send.
    assert s.rewrite(head, "other.test") == (b"", "the placeholder of GITHUB_TOKEN outside the header it may "
                                                   "fill for this host")
    # The right host, another header or the request line: refused.
    for wrong in (b"GET /?t=" + placeholder + b" HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
                  b"GET / HTTP/1.1\r\nX-Token: " + placeholder + b"\r\n\r\n",
                  b"GET / HTTP/1.1\r\nX-Authorization: " + placeholder + b"\r\n\r\n"):
        assert s.rewrite(wrong, "api.example.com")[1] is not None, wrong
    assert s.carried(b"POST / HTTP/1.1\r\n\r\n" + placeholder) == "GITHUB_TOKEN"
    assert s.carried(b"GET / HTTP/1.1\r\n\r\n") is None


def test_which_hosts_are_intercepted() -> None:
    s = secrets()
    assert s.intercepts("api.example.com") and s.intercepts("API.Example.COM.")
    assert not s.intercepts("other.test") and not s.intercepts("not a host")


def test_a_client_trusting_the_bundle_accepts_the_sessions_certificate(tmp_path: Path) -> None:
    ca = SessionCA()
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(ca.bundle())
    assert ca.certificate_pem() in bundle.read_bytes()
    assert bundle.read_bytes().count(b"BEGIN CERTIFICATE") > 1  # the system's CAs are kept
    server_context = ca.server_context("api.example.com")
    assert ca.server_context("api.example.com") is server_context
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with server_context.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"hello over tls")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = ssl.create_default_context(cafile=str(bundle))
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            client.wrap_socket(raw, server_hostname="api.example.com") as tls:
        assert tls.recv(100) == b"hello over tls"
    thread.join(10)
    listener.close()
    # Without the bundle (the host's own trust) the session's certificate is refused.
    other = socket.create_server(("127.0.0.1", 0))

    def serve_once() -> None:
        conn, _ = other.accept()
        with contextlib.suppress(ssl.SSLError, OSError):
            server_context.wrap_socket(conn, server_side=True).close()

    threading.Thread(target=serve_once, daemon=True).start()
    with socket.create_connection(other.getsockname()) as raw, pytest.raises(ssl.SSLCertVerificationError):
        ssl.create_default_context().wrap_socket(raw, server_hostname="api.example.com")
    other.close()


def test_a_copy_of_a_value_under_another_name_is_found() -> None:
    rules = parse(["api.test"])
    rule = parse_secret(rules, "TOKEN", ["api.test"])
    secrets = Secrets([rule], {"TOKEN": "s3cr3t-value"})
    placeholder = secrets.environment()["TOKEN"]
    assert secrets.found_in({"TOKEN": placeholder, "PATH": "/bin"}) is None
    assert secrets.found_in({"COPY": "Bearer s3cr3t-value"}) == ("COPY", "TOKEN")
    # Before the placeholders go in: the secret's own variable is not a copy.
    source = {"TOKEN": "s3cr3t-value"}
    assert values_in([rule], {"TOKEN": "s3cr3t-value", "PATH": "/bin"}, source) is None
    assert values_in([rule], {"TOKEN": "s3cr3t-value", "GH": "xs3cr3t-value"}, source) == ("GH", "TOKEN")
