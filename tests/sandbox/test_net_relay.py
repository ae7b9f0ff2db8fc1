"""The proxy's tunnel relay (``sandbox/net_relay.py``), on loopback: bytes the
client sent with its head are not lost, a client that does not read holds the
upstream back (the host buffers a bounded amount), half-closes pass through,
and a side that goes away ends the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from tests.sandbox.test_net_proxy import connect, exchange, proxy, run, upstream

MIB = 2**20
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def tunnel_to(handler: Handler) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A CONNECT tunnel through the proxy to a loopback server running ``handler``."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    async with server, proxy() as (_, port):
        head, reader, writer = await connect(port, f"allowed.test:{server.sockets[0].getsockname()[1]}")
        assert head.startswith(b"HTTP/1.1 200 ")
        try:
            yield reader, writer
        finally:
            writer.close()


def test_bytes_sent_with_the_connect_head_reach_the_upstream() -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (_, port):
            target = f"allowed.test:{up.port}"
            reader, writer = await exchange(port, f"CONNECT {target} HTTP/1.1\r\n\r\nsent early".encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            assert await reader.readexactly(10) == b"sent early"
            writer.close()

    run(test)


def test_a_client_that_does_not_read_holds_the_upstream_back() -> None:
    total = 128 * MIB
    sent = [0]

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunk = b"x" * MIB
        for _ in range(total // MIB):
            writer.write(chunk)
            await writer.drain()
            sent[0] += MIB
        writer.close()

    async def test() -> None:
        async with tunnel_to(flood) as (reader, _writer):
            await asyncio.sleep(1.0)  # the client reads nothing meanwhile
            # Socket buffers on three connections and the transport's mark, not the whole download.
            assert sent[0] < 48 * MIB, sent[0]
            received = 0
            while data := await reader.read(4 * MIB):
                received += len(data)
            assert received == total

    run(test)


def test_a_half_closed_request_still_gets_its_answer() -> None:
    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await reader.read()  # until the client's EOF
        writer.write(b"got %d bytes" % len(body))
        writer.close()

    async def test() -> None:
        async with tunnel_to(count) as (reader, writer):
            writer.write(b"y" * 100_000)
            writer.write_eof()
            assert await reader.read() == b"got 100000 bytes"

    run(test)


def test_a_client_that_goes_away_ends_the_upstream_and_its_task() -> None:
    async def test() -> None:
        async with upstream() as up, proxy() as (p, port):
            head, _reader, writer = await connect(port, f"allowed.test:{up.port}")
            assert head.startswith(b"HTTP/1.1 200 ")
            writer.transport.abort()
            async with asyncio.timeout(5):
                await up.ended.wait()
                while p._tasks:
                    await asyncio.sleep(0.01)

    run(test)
