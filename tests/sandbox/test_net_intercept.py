"""The proxy puts a secret in place of its placeholder (``NetworkProxy(secrets=..., ca=...)``).

On loopback only: an upstream with a certificate from a stand-in public CA
(the proxy checks it with ``upstream_tls``), a client that trusts the
session's CA.  The real value reaches only the secret's host, only in its
header, only over TLS; a placeholder anywhere else is refused and recorded;
other hosts' tunnels are not touched."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from dsh.sandbox.net_proxy import NetworkProxy
from dsh.sandbox.net_rules import parse
from dsh.sandbox.net_secrets import Secrets, SessionCA, parse_secret

from tests.sandbox.test_net_proxy import Resolver, run

RULES = parse(["api.test", "other.test"], allow_private_for=["api.test", "other.test"])
TOKEN = "ghp_the_real_value"
PUBLIC = SessionCA()  # stands in for the CAs the host trusts


@dataclass
class TlsUpstream:
    """Answers one request per connection over TLS and records each head."""

    port: int = 0
    heads: list[bytes] = field(default_factory=list)
    lenient: bool = False  # answer every request of a connection, whatever it said about closing

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                self.heads.append(await reader.readuntil(b"\r\n\r\n"))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                if not self.lenient:
                    break
        writer.close()


@contextlib.asynccontextmanager
async def setup(lenient: bool = False) -> AsyncIterator[tuple[NetworkProxy, int, TlsUpstream, str]]:
    up = TlsUpstream(lenient=lenient)
    server = await asyncio.start_server(up.handle, "127.0.0.1", 0, ssl=PUBLIC.server_context("api.test"))
    up.port = server.sockets[0].getsockname()[1]
    secrets = Secrets([parse_secret(RULES, "TOKEN", ["api.test"])], {"TOKEN": TOKEN})
    trusted = ssl.create_default_context(cadata=PUBLIC.certificate_pem().decode())
    proxy = NetworkProxy(RULES, resolver=Resolver(), secrets=secrets, ca=SessionCA(), upstream_tls=trusted)
    _, port = await proxy.start()
    try:
        async with server:
            yield proxy, port, up, secrets.environment()["TOKEN"]
    finally:
        await proxy.close()


async def through(port: int, host: str, up_port: int, head: bytes, trust: bytes) -> bytes:
    """CONNECT, TLS trusting ``trust``, one request; the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"CONNECT {host}:{up_port} HTTP/1.1\r\n\r\n".encode())
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
    await writer.start_tls(ssl.create_default_context(cadata=trust.decode()), server_hostname=host)
    writer.write(head)
    answer = await reader.read()
    writer.close()
    return answer


def test_the_value_reaches_only_its_host_in_its_header() -> None:
    async def test() -> None:
        async with setup() as (proxy, port, up, placeholder):
            session_ca = proxy._ca
            assert session_ca is not None
            head = f"GET /user HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {placeholder}\r\n" \
                   "Connection: keep-alive\r\n\r\n".encode()
            answer = await through(port, "api.test", up.port, head, session_ca.certificate_pem())
            assert answer.endswith(b"ok")
            [seen] = up.heads
            assert f"Authorization: Bearer {TOKEN}\r\n".encode() in seen and placeholder.encode() not in seen
            assert b"Connection: close\r\n" in seen and b"keep-alive" not in seen
            assert proxy.refusals == ()

    run(test)


def test_a_placeholder_anywhere_else_is_refused_and_recorded() -> None:
    async def test() -> None:
        async with setup() as (proxy, port, up, placeholder):
            assert proxy._ca is not None
            head = f"GET /?token={placeholder} HTTP/1.1\r\nHost: api.test\r\n\r\n".encode()
            answer = await through(port, "api.test", up.port, head, proxy._ca.certificate_pem())
            assert answer.startswith(b"HTTP/1.1 403 ")
            plain = f"GET http://other.test:{up.port}/ HTTP/1.1\r\nX-Token: {placeholder}\r\n\r\n".encode()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(plain)
            assert (await reader.read()).startswith(b"HTTP/1.1 403 ")
            writer.close()
            assert up.heads == []  # neither request went on
            assert [(r.name, r.reason.split(":")[0]) for r in proxy.refusals] == [
                ("api.test", "the placeholder of TOKEN outside the header it may fill for this host"),
                ("other.test", "the placeholder of TOKEN in a plain-HTTP request")]

    run(test)


def test_other_hosts_tunnels_are_not_touched() -> None:
    async def test() -> None:
        async with setup() as (_, port, up, placeholder):
            # other.test is no secret's host: the client's TLS reaches the upstream
            # itself, whose certificate (for api.test, from the public stand-in) it checks.
            head = f"GET / HTTP/1.1\r\nAuthorization: {placeholder}\r\n\r\n".encode()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"CONNECT other.test:{up.port} HTTP/1.1\r\n\r\n".encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            await writer.start_tls(ssl.create_default_context(cadata=PUBLIC.certificate_pem().decode()),
                                   server_hostname="api.test")
            writer.write(head)
            assert (await reader.read()).endswith(b"ok")
            writer.close()
            assert up.heads == [head]  # as the client sent it: the placeholder, never the value

    run(test)


def test_an_upstream_the_proxy_cannot_verify_gets_502() -> None:
    async def test() -> None:
        up = TlsUpstream()
        server = await asyncio.start_server(up.handle, "127.0.0.1", 0, ssl=SessionCA().server_context("api.test"))
        secrets = Secrets([parse_secret(RULES, "TOKEN", ["api.test"])], {"TOKEN": TOKEN})
        proxy = NetworkProxy(RULES, resolver=Resolver(), secrets=secrets, ca=SessionCA(),
                             upstream_tls=ssl.create_default_context(cadata=PUBLIC.certificate_pem().decode()))
        _, port = await proxy.start()
        try:
            async with server:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(f"CONNECT api.test:{server.sockets[0].getsockname()[1]} HTTP/1.1\r\n\r\n".encode())
                answer = await reader.read()
                assert answer.startswith(b"HTTP/1.1 502 ") and b"certificate verify failed" in answer, answer
                writer.close()
                assert up.heads == []
        finally:
            await proxy.close()

    run(test)


def test_the_host_a_request_names_is_the_tunnels_own() -> None:
    # A shared front end routes by Host: the value must go where the certificate was checked.
    async def test() -> None:
        async with setup() as (proxy, port, up, placeholder):
            assert proxy._ca is not None
            head = f"GET /user HTTP/1.1\r\nHost: evil.example\r\nHost: api.test\r\nAuthorization: Bearer " \
                   f"{placeholder}\r\n\r\n".encode()
            answer = await through(port, "api.test", up.port, head, proxy._ca.certificate_pem())
            assert answer.endswith(b"ok")
            [seen] = up.heads
            hosts = [line for line in seen.split(b"\r\n") if line.lower().startswith(b"host:")]
            assert hosts == [f"Host: api.test:{up.port}".encode()]
            assert f"Authorization: Bearer {TOKEN}\r\n".encode() in seen

    run(test)


def test_requests_that_name_another_host_or_echo_themselves_are_refused() -> None:
    async def test() -> None:
        async with setup() as (proxy, port, up, placeholder):
            assert proxy._ca is not None
            heads = [f"GET / HTTP/1.1\r\nHost: api.test\r\n{extra}\r\nAuthorization: Bearer {placeholder}\r\n\r\n"
                     for extra in ("X-Forwarded-Host: evil.example", "Forwarded: host=evil.example",
                                   "x-original-url: http://evil.example/")]
            heads += [f"{method} / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {placeholder}\r\n\r\n"
                      for method in ("TRACE", "TRACK")]
            for head in heads:
                answer = await through(port, "api.test", up.port, head.encode(), proxy._ca.certificate_pem())
                assert answer.startswith(b"HTTP/1.1 403 "), (head, answer)
            assert up.heads == []
            reasons = [r.reason for r in proxy.refusals]
            assert reasons[:3] == ["a request to a host a secret is for names another host (x-forwarded-host)",
                                   "a request to a host a secret is for names another host (forwarded)",
                                   "a request to a host a secret is for names another host (x-original-url)"]
            assert reasons[3:] == [f"{m} to a host a secret is for: its answer echoes the request"
                                   for m in ("TRACE", "TRACK")]

    run(test)


def test_connections_that_end_in_resets_leave_no_task_error() -> None:
    # The proxy runs in the CLI's process: an error it does not catch is a traceback on the user's terminal.
    def client(port: int, up_port: int, placeholder: str, trust: bytes) -> None:
        context = ssl.create_default_context(cadata=trust.decode())
        for _ in range(5):
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            raw.sendall(f"CONNECT api.test:{up_port} HTTP/1.1\r\n\r\n".encode())
            raw.recv(100)
            tls = context.wrap_socket(raw, server_hostname="api.test")
            tls.sendall(f"GET /a HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {placeholder}\r\n\r\n"
                        "GET /b HTTP/1.1\r\nHost: api.test\r\n\r\n".encode())
            time.sleep(0.2)
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, nothing read
            tls.close()

    async def test() -> None:
        async with setup(lenient=True) as (proxy, port, up, placeholder):
            assert proxy._ca is not None
            plain_ended = proxy._ended

            def ended(task: asyncio.Task[None]) -> None:
                if not task.cancelled() and task.exception() is not None:
                    errors.append(repr(task.exception()))
                plain_ended(task)

            proxy._ended = ended  # type: ignore[method-assign]
            await asyncio.to_thread(client, port, up.port, placeholder, proxy._ca.certificate_pem())
            for _ in range(150):
                if not proxy._tasks:
                    break
                await asyncio.sleep(0.02)
            assert not proxy._tasks

    errors: list[str] = []
    run(test)
    assert errors == []
