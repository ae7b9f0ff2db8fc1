"""How much the allowlist proxy costs: concurrent downloads from a loopback
HTTP server, directly, then through the proxy (plain HTTP and CONNECT).

Run by hand (pytest does not collect it: the name has no ``test_`` prefix):

    python tests/bench_net_proxy.py [--clients 50] [--mib 4]

It prints the times and the ratios and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from dsh.sandbox.net_proxy import NetworkProxy
from dsh.sandbox.net_rules import parse

CHUNK = b"x" * 2**16


async def serve(size: int) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        for _ in range(size // len(CHUNK)):
            writer.write(CHUNK)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def download(port: int, head: bytes, tunnel: bytes = b"") -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if tunnel:
        writer.write(tunnel)
        await reader.readuntil(b"\r\n\r\n")
    writer.write(head)
    received = 0
    while data := await reader.read(2**18):
        received += len(data)
    writer.close()
    return received


async def timed(clients: int, size: int, port: int, head: bytes, tunnel: bytes = b"") -> float:
    start = time.perf_counter()
    sizes = await asyncio.gather(*(download(port, head, tunnel) for _ in range(clients)))
    elapsed = time.perf_counter() - start
    if min(sizes) < size:
        raise SystemExit(f"a download was cut short: {min(sizes)} < {size} bytes")
    return elapsed


async def main(clients: int, mib: int) -> None:
    size = mib * 2**20

    async def resolver(name: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    server = await serve(size)
    up = server.sockets[0].getsockname()[1]
    proxy = NetworkProxy(parse(["bench.test"], allow_private_for=["bench.test"]), resolver=resolver)
    _, port = await proxy.start()
    try:
        async with asyncio.timeout(300):
            direct = await timed(clients, size, up, b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n")
            plain = await timed(clients, size, port, f"GET http://bench.test:{up}/ HTTP/1.1\r\n\r\n".encode())
            tunnel = f"CONNECT bench.test:{up} HTTP/1.1\r\n\r\n".encode()
            connect = await timed(clients, size, port, b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n", tunnel)
    finally:
        await proxy.close()
        server.close()
    total = clients * size / 2**20
    print(f"{clients} clients x {mib} MiB = {total:.0f} MiB in all")
    for label, seconds in (("direct", direct), ("proxy, plain HTTP", plain), ("proxy, CONNECT", connect)):
        print(f"{label:>18}: {seconds:6.2f} s  {total / seconds:8.0f} MiB/s  x{seconds / direct:.2f} of direct")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--mib", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.clients, args.mib))
