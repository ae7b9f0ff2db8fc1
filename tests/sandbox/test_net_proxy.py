"""The allowlist proxy (``sandbox/net_proxy.py``) on loopback only: an allowed
name passes through CONNECT, plain HTTP and SOCKS5; refused names and
addresses get 403 or SOCKS5 reply 0x02 and are recorded; hostile input gets
its error while the server keeps serving; ``close()`` leaves nothing behind.

Names are resolved by an injected resolver that maps every test name to
127.0.0.1, so each refusal below comes from the rules, never from DNS."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from dsh.sandbox.net_proxy import (
    NAME_SHOWN,
    NAMES_REPORTED,
    NetworkProxy,
    ProxyLimits,
    ProxyThread,
    Refusal,
    refused_names,
)
from dsh.sandbox.net_rules import NetworkRules, parse
from hypothesis import given, settings
from hypothesis import strategies as st

RULES = parse(
    allow=["allowed.test", "*.wild.test", "rebind.test", "*.corp.test", "127.0.0.2"],
    deny=["bad.corp.test", "bücher.corp.test"],
    allow_private_for=["allowed.test", "*.wild.test", "*.corp.test", "127.0.0.2"],
)
FAST = ProxyLimits(head_timeout=0.5, max_head_bytes=4096, max_request_line=1024)


def run(test: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(20):
            await test()

    asyncio.run(bounded())


@dataclass
class Upstream:
    """A loopback echo server that counts its clients and says when one ends."""

    port: int = 0
    clients: int = 0
    received: list[bytes] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    http: bool = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients += 1
        if self.http:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")), 0
            )
            body = await reader.readexactly(length)
            self.received.append(head + body)
            answer = b"upstream saw " + head.split(b"\r\n")[0] + b" and " + body
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
        else:
            while data := await reader.read(4096):
                writer.write(data)
        writer.close()
        await writer.wait_closed()
        self.ended.set()


@contextlib.asynccontextmanager
async def upstream(http: bool = False, host: str = "127.0.0.1") -> AsyncIterator[Upstream]:
    up = Upstream(http=http)
    server = await asyncio.start_server(up.handle, host, 0)
    up.port = server.sockets[0].getsockname()[1]
    async with server:
        yield up


@dataclass
class Resolver:
    calls: list[str] = field(default_factory=list)
    delay: float = 0.0
    error: OSError | None = None

    async def __call__(self, name: str, port: int) -> list[str]:
        self.calls.append(name)
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return ["127.0.0.1"]


@contextlib.asynccontextmanager
async def proxy(
    limits: ProxyLimits = FAST, rules: NetworkRules = RULES, resolver: Resolver | None = None
) -> AsyncIterator[tuple[NetworkProxy, int]]:
    p = NetworkProxy(rules, resolver=resolver or Resolver(), limits=limits)
    _, port = await p.start()
    try:
        yield p, port
    finally:
        await p.close()


async def exchange(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def connect(port: int, target: str) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await exchange(port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    return head, reader, writer


async def socks(port: int, request: bytes) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await exchange(port, b"\x05\x01\x00" + request)
    assert await reader.readexactly(2) == b"\x05\x00"
    return await reader.readexactly(10), reader, writer


def socks_name(name: str, port: int, command: int = 1) -> bytes:
    raw = name.encode()
    return bytes([5, command, 0, 3, len(raw)]) + raw + port.to_bytes(2, "big")


async def echoes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"ping")
    await writer.drain()
    ok = await reader.readexactly(4) == b"ping"
    writer.close()
    return ok


async def still_serves(port: int, up: Upstream) -> None:
    head, reader, writer = await connect(port, f"allowed.test:{up.port}")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert await echoes(reader, writer)


def test_connect_tunnels_to_an_allowed_name() -> None:
    async def test() -> None:
        async with upstream() as up, upstream(host="127.0.0.2") as listed, proxy() as (p, port):
            for target in ("allowed.test", "x.wild.test", "ALLOWED.Test.", "ok.corp.test"):
                head, reader, writer = await connect(port, f"{target}:{up.port}")
                assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
                assert await echoes(reader, writer)
            assert up.clients == 4
            head, reader, writer = await connect(port, f"127.0.0.2:{listed.port}")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert await echoes(reader, writer)
            assert p.refusals == ()

    run(test)


def test_plain_http_is_forwarded_in_origin_form() -> None:
    async def test() -> None:
        async with upstream(http=True) as up, proxy() as (p, port):
            request = (
                f"POST http://allowed.test:{up.port}/path?q=1#frag HTTP/1.1\r\nHost: elsewhere.test\r\n"
                "Proxy-Connection: keep-alive\r\nX-Drop: 1\r\nConnection: X-Drop\r\nContent-Length: 5\r\n\r\nhello"
            )
            reader, writer = await exchange(port, request.encode())
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            assert answer.endswith(b"upstream saw POST /path?q=1 HTTP/1.1 and hello")
            sent = up.received[0].decode()
            assert f"Host: allowed.test:{up.port}\r\n" in sent
            assert "Connection: close\r\n" in sent
            for dropped in ("elsewhere", "Proxy-Connection", "X-Drop", "keep-alive"):
                assert dropped not in sent
            assert p.refusals == ()

    run(test)


def test_socks5_connects_by_name_ipv4_and_ipv6() -> None:
    async def test() -> None:
        async with upstream() as up, upstream(host="127.0.0.2") as listed, proxy() as (p, port):
            reply, reader, writer = await socks(port, socks_name("allowed.test", up.port))
            assert reply[:2] == b"\x05\x00"
            assert await echoes(reader, writer)
            ipv4 = bytes([5, 1, 0, 1, 127, 0, 0, 2]) + listed.port.to_bytes(2, "big")
            reply, reader, writer = await socks(port, ipv4)
            assert reply[:2] == b"\x05\x00"
            assert await echoes(reader, writer)
            # ::1 is not listed: the IPv6 form is parsed, then refused by the rules.
            ipv6 = bytes([5, 1, 0, 4]) + socket.inet_pton(socket.AF_INET6, "::1") + up.port.to_bytes(2, "big")
            reply, _, writer = await socks(port, ipv6)
            writer.close()
            assert reply[:2] == b"\x05\x02"
            assert p.refusals == (Refusal("::1", "address ::1 is not in the network allowlist"),)
            assert (up.clients, listed.clients) == (1, 1)

    run(test)


REFUSED = [
    ("bad.corp.test", "denied by 'bad.corp.test'"),
    ("BAD.Corp.Test.", "denied by 'bad.corp.test'"),
    ("xn--bcher-kva.corp.test", "denied by 'xn--bcher-kva.corp.test'"),
    ("wild.test", "not in the network allowlist"),
    ("nothere.test", "not in the network allowlist"),
    ("127.0.0.1", "address 127.0.0.1 is not in"),
    ("[::1]", "address ::1 is not in"),
    ("[::ffff:127.0.0.2]", "not in"),
    ("localhost.", "name localhost is not in"),
    ("0x7f.1", "numeric"),
    ("2130706433", "numeric"),
    ("rebind.test", "resolved to loopback address 127.0.0.1"),
]


@pytest.mark.parametrize(("host", "why"), REFUSED)
def test_refused_connect_targets_get_403_and_are_recorded(host: str, why: str) -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (p, port):
            head, reader, writer = await connect(port, f"{host}:{up.port}")
            body = await reader.read()
            writer.close()
            assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
            assert why in body.decode()
            assert [r.name for r in p.refusals] == [host.strip("[]")]
            assert why in p.refusals[0].reason
            assert up.clients == 0
            # The name is checked before it is resolved: only rebind.test reaches DNS.
            assert p._resolve.calls == (["rebind.test"] if host == "rebind.test" else [])  # type: ignore[attr-defined]

    run(test)


@pytest.mark.parametrize(
    "host", ["bad.corp.test", "bücher.corp.test", "BÜCHER.corp.test.", "ｂａｄ.corp.test", "0x7f.1", "localhost.", ""]
)
def test_refused_socks5_names_get_reply_2_and_are_recorded(host: str) -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (p, port):
            reply, _, writer = await socks(port, socks_name(host, up.port))
            writer.close()
            assert reply[:2] == b"\x05\x02"
            assert [r.name for r in p.refusals] == [host]
            assert up.clients == 0

    run(test)


def test_refused_plain_http_gets_403() -> None:
    async def test() -> None:
        async with upstream(http=True) as up, proxy() as (p, port):
            reader, writer = await exchange(port, f"GET http://rebind.test:{up.port}/ HTTP/1.1\r\n\r\n".encode())
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 403 ")
            assert p.refusals[0].name == "rebind.test"
            assert up.clients == 0

    run(test)


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"CONNECT allowed.test HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT allowed.test:0 HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT allowed.test:65536 HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT [::1:443 HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT user@allowed.test:443 HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT allowed .test:443 HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT allowed\x00.test:443 HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT allowed.test:443\r\n\r\n", b"400"),
        (b"CONNECT allowed.test:443 HTTP/1.1\r\nno colon\r\n\r\n", b"400"),
        (b"GET https://allowed.test/ HTTP/1.1\r\n\r\n", b"400"),
        (b"GET /relative HTTP/1.1\r\n\r\n", b"400"),
        (b"\xff\xfe garbage \x00\r\n\r\n", b"400"),
        (b"GET http://allowed.test/ HTTP/1.1\r\nX: " + b"a" * 5000 + b"\r\n\r\n", b"431"),
        (b"GET http://allowed.test/" + b"a" * 2000 + b" HTTP/1.1\r\n\r\n", b"414"),
        (b"GET http://allowed.test/ HTTP/1.1\r\n" + b"X: a\r\n" * 700 + b"\r\n", b"431"),
        (b"CONNECT allowed.test:1 HTTP/1.1\r\nHost: x\r\n", b"408"),  # never ends its head
    ],
)
def test_malformed_requests_get_their_error_and_the_server_goes_on(request_head: bytes, status: bytes) -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (p, port):
            reader, writer = await exchange(port, request_head)
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 " + status + b" "), answer[:80]
            assert p.refusals == ()
            await still_serves(port, up)

    run(test)


def test_a_slow_client_times_out_while_others_are_served() -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (p, port):
            slow_reader, slow_writer = await exchange(port, b"CONN")
            await still_serves(port, up)
            assert (await slow_reader.read()).startswith(b"HTTP/1.1 408 ")
            slow_writer.close()
            await still_serves(port, up)
            assert p.refusals == ()  # a timeout is no refusal by the rules

    run(test)


@pytest.mark.parametrize(
    ("socks_request", "reply"),
    [
        (socks_name("allowed.test", 80, command=2), 0x07),  # BIND
        (socks_name("allowed.test", 80, command=3), 0x07),  # UDP ASSOCIATE
        (bytes([5, 1, 0, 9, 1, 2]), 0x08),  # unknown address type
        (socks_name("allowed.test", 0), 0x01),
    ],
)
def test_socks5_refuses_what_it_does_not_do(socks_request: bytes, reply: int) -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (p, port):
            answer, reader, writer = await socks(port, socks_request)
            assert answer[:2] == bytes([5, reply])
            assert await reader.read() == b""
            writer.close()
            await still_serves(port, up)
            assert p.refusals == ()

    run(test)


def test_socks5_without_the_no_auth_method_is_turned_away() -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (_, port):
            reader, writer = await exchange(port, b"\x05\x01\x02")
            assert await reader.read() == b"\x05\xff"
            writer.close()
            await still_serves(port, up)

    run(test)


@pytest.mark.parametrize(
    "junk", [b"\x05", b"\x05\x00", b"\x05\x01\x00\x05\x01\x00\x03\xff", b"\x00" * 100, b"\r\n\r\n"]
)
def test_truncated_or_junk_input_never_stops_the_server(junk: bytes) -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (_, port):
            reader, writer = await exchange(port, junk)
            writer.write_eof()
            await reader.read()
            writer.close()
            await still_serves(port, up)

    run(test)


def test_connections_over_the_cap_are_closed_unanswered() -> None:
    async def test() -> None:
        async with upstream() as up, proxy(ProxyLimits(max_connections=1)) as (_, port):
            head, reader, writer = await connect(port, f"allowed.test:{up.port}")
            assert head.startswith(b"HTTP/1.1 200 ")
            extra_reader, extra_writer = await exchange(
                port, f"CONNECT allowed.test:{up.port} HTTP/1.1\r\n\r\n".encode()
            )
            with contextlib.suppress(ConnectionResetError):
                assert await extra_reader.read() == b""
            extra_writer.close()
            assert await echoes(reader, writer)  # the one within the cap is untouched

    run(test)


def test_at_the_cap_the_quietest_connection_makes_room() -> None:
    """One command holding every slot idle must not starve the session's others."""
    async def test() -> None:
        async with upstream() as up, proxy(ProxyLimits(max_connections=2, busy_grace=0.3)) as (_, port):
            idle = [await exchange(port, b"") for _ in range(2)]  # say nothing, hold a slot each
            await asyncio.sleep(0.5)
            head, reader, writer = await connect(port, f"allowed.test:{up.port}")
            assert head.startswith(b"HTTP/1.1 200 ")  # served
            assert await idle[0][0].read() == b""  # the quietest was closed for it
            assert await echoes(reader, writer)
            for _, w in idle:
                w.close()

    run(test)


def test_refusals_are_capped_keeping_the_latest() -> None:
    async def test() -> None:
        async with proxy(ProxyLimits(max_refusals=2)) as (p, port):
            for name in ("one.test", "two.test", "three.test"):
                _, reader, writer = await connect(port, f"{name}:80")
                await reader.read()
                writer.close()
            assert [r.name for r in p.refusals] == ["two.test", "three.test"]

    run(test)


def test_a_refusal_keeps_a_bounded_name_and_a_report_bounded_names() -> None:
    async def test() -> None:
        async with proxy() as (p, port):
            head, _reader, writer = await connect(port, "a" * 900 + ".test:80")
            assert head.startswith(b"HTTP/1.1 403 ")
            writer.close()
            [refusal] = p.refusals
            assert len(refusal.name) == NAME_SHOWN and refusal.name.endswith("...")

    run(test)
    many = [Refusal(f"n{i % 150}.test", "x") for i in range(1000)]
    assert refused_names(many) == tuple(f"n{i}.test" for i in range(NAMES_REPORTED))


def test_refusals_since_a_mark_are_those_after_it_as_far_as_kept() -> None:
    async def refuse(port: int, name: str) -> None:
        _, reader, writer = await connect(port, f"{name}:80")
        await reader.read()
        writer.close()

    async def test() -> None:
        async with proxy(ProxyLimits(max_refusals=3)) as (p, port):
            assert p.refused == 0 and p.refusals_since(0) == ()
            await refuse(port, "one.test")
            mark = p.refused
            assert mark == 1 and p.refusals_since(mark) == ()
            await refuse(port, "two.test")
            assert [r.name for r in p.refusals_since(mark)] == ["two.test"]
            for name in ("three.test", "four.test", "five.test"):
                await refuse(port, name)
            # Four since the mark, three kept: the oldest is gone, never another one's.
            assert [r.name for r in p.refusals_since(mark)] == ["three.test", "four.test", "five.test"]
            assert [r.name for r in p.refusals_since(p.refused - 1)] == ["five.test"]

    run(test)


def _sockets() -> int:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sum(link.startswith("socket:") for link in links)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets through /proc")
def test_close_ends_every_connection_and_leaves_no_task_or_socket() -> None:
    async def test() -> None:
        async with upstream() as up:
            gc.collect()  # sockets earlier tests left to the collector must not close mid-count
            before = _sockets()
            p = NetworkProxy(RULES, resolver=Resolver(), limits=FAST)
            _, port = await p.start()
            head, tunnel_reader, tunnel_writer = await connect(port, f"allowed.test:{up.port}")
            assert head.startswith(b"HTTP/1.1 200 ")
            idle_reader, idle_writer = await exchange(port, b"")
            mid_reader, mid_writer = await exchange(port, b"CONNECT allowed.te")
            assert any(t.get_name() == "dsh-net-proxy-connection" for t in asyncio.all_tasks())
            await p.close()
            assert not [t for t in asyncio.all_tasks() if t.get_name() == "dsh-net-proxy-connection"]
            assert await tunnel_reader.read() == b""
            assert await idle_reader.read() == b""
            # Bytes the proxy had not read yet make the kernel answer with a
            # reset rather than an end of stream: closed, either way.
            with contextlib.suppress(ConnectionResetError):
                assert await mid_reader.read() == b""
            await up.ended.wait()  # the proxy closed its side to the upstream too
            for w in (tunnel_writer, idle_writer, mid_writer):
                w.close()
                with contextlib.suppress(ConnectionResetError):
                    await w.wait_closed()
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.1", port)
            assert _sockets() <= before

    run(test)


def test_proxy_thread_serves_synchronous_callers() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(4))
        writer.close()

    thread = ProxyThread(RULES, resolver=Resolver(), limits=FAST)
    host, port = thread.start()
    try:
        # The upstream runs on the proxy's own loop: this test has no other.
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(echo, "127.0.0.1", 0), thread._loop).result(5)
        up_port = server.sockets[0].getsockname()[1]
        with socket.create_connection((host, port), timeout=5) as client:
            client.sendall(f"CONNECT allowed.test:{up_port} HTTP/1.1\r\n\r\n".encode())
            assert client.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            client.sendall(b"ping")
            assert client.recv(4) == b"ping"
        with socket.create_connection((host, port), timeout=5) as client:
            client.sendall(b"CONNECT nothere.test:1 HTTP/1.1\r\n\r\n")
            assert client.recv(100).startswith(b"HTTP/1.1 403 ")
        assert [r.name for r in thread.refusals] == ["nothere.test"]
        server.close()
    finally:
        thread.close()
    assert not thread._thread.is_alive()
    assert thread._loop.is_closed()


def test_resolving_and_connecting_are_not_timed_as_the_clients_head() -> None:
    async def test() -> None:
        slow = Resolver(delay=FAST.head_timeout * 2)
        async with upstream() as up, proxy(resolver=slow) as (_, port):
            await still_serves(port, up)

    run(test)


@pytest.mark.parametrize(
    ("resolver", "limits"),
    [
        (Resolver(error=socket.gaierror(socket.EAI_NONAME, "Name or service not known")), FAST),
        (Resolver(delay=60), ProxyLimits(resolve_timeout=0.2)),
    ],
)
def test_a_name_that_does_not_resolve_gets_502_and_is_no_refusal(resolver: Resolver, limits: ProxyLimits) -> None:
    async def test() -> None:
        async with proxy(limits=limits, resolver=resolver) as (p, port):
            head, reader, writer = await connect(port, "allowed.test:443")
            body = await reader.read()
            writer.close()
            assert head.startswith(b"HTTP/1.1 502 ")
            assert b"cannot resolve allowed.test" in body
            assert p.refusals == ()

    run(test)


def test_a_closed_upstream_port_gets_502() -> None:
    async def test() -> None:
        async with upstream() as up:
            closed_port = up.port
        async with proxy() as (p, port):
            head, reader, writer = await connect(port, f"allowed.test:{closed_port}")
            assert b"cannot connect to allowed.test" in await reader.read()
            writer.close()
            assert head.startswith(b"HTTP/1.1 502 ")
            reply, _, writer = await socks(port, socks_name("allowed.test", closed_port))
            writer.close()
            assert reply[:2] == b"\x05\x05"
            assert p.refusals == ()

    run(test)


def test_an_idle_tunnel_is_closed_on_both_sides() -> None:
    async def test() -> None:
        async with upstream() as up, proxy(ProxyLimits(idle_timeout=0.3)) as (_, port):
            head, reader, writer = await connect(port, f"allowed.test:{up.port}")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert await reader.read() == b""
            await up.ended.wait()
            writer.close()

    run(test)


def test_a_one_way_download_longer_than_the_idle_timeout_goes_on() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(8):  # 0.8 s in all, never 0.3 s without a byte
            writer.write(b"chunk")
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.close()

    async def test() -> None:
        server = await asyncio.start_server(trickle, "127.0.0.1", 0)
        async with server, proxy(ProxyLimits(idle_timeout=0.3)) as (_, port):
            head, reader, writer = await connect(port, f"allowed.test:{server.sockets[0].getsockname()[1]}")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert await reader.read() == b"chunk" * 8
            writer.close()

    run(test)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_listener_and_a_listed_ipv6_literal() -> None:
    async def test() -> None:
        rules = parse(["::1"], allow_private_for=["::1"])
        p6 = NetworkProxy(rules, host="::1", resolver=Resolver(), limits=FAST)
        host, port = await p6.start()
        try:
            async with upstream(host="::1") as up:
                reader, writer = await asyncio.open_connection("::1", port)
                writer.write(f"CONNECT [::1]:{up.port} HTTP/1.1\r\n\r\n".encode())
                assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
                assert await echoes(reader, writer)
                assert p6.refusals == ()
        finally:
            await p6.close()
        assert host == "::1"

    run(test)


def test_proxy_thread_start_failure_leaves_no_thread() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        thread = ProxyThread(RULES, port=taken.getsockname()[1])
        with pytest.raises(OSError):
            thread.start()
    assert not thread._thread.is_alive()
    assert thread._loop.is_closed()


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_stop_the_server(junk: bytes) -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (_, port):
            reader, writer = await exchange(port, junk)
            writer.write_eof()
            with contextlib.suppress(ConnectionResetError):
                await reader.read()
            writer.close()
            await still_serves(port, up)

    run(test)
