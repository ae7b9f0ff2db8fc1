"""How much the allowlist proxy costs: concurrent downloads from a loopback
HTTP server, directly, then through the proxy (plain HTTP and CONNECT).

Run by hand (pytest does not collect it: the name has no ``test_`` prefix):

    python tests/bench_net_proxy.py [--clients 50] [--mib 4] [--rounds 3]

The server and the clients each run in a process of their own, and the proxy
in this one, on its own thread (``ProxyThread``), as in a sandboxed run: the
command's processes download, the host's proxy relays.  Each round measures
direct, plain HTTP and CONNECT back to back; the best round of each is
printed, with the throughput through the proxy as a share of the direct one.
It asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

CHUNK = b"x" * 2**16


async def serve(size: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        for _ in range(size // len(CHUNK)):
            writer.write(CHUNK)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes it


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


async def clients(count: int, size: int, port: int, head: bytes, tunnel: bytes) -> None:
    start = time.perf_counter()
    sizes = await asyncio.gather(*(download(port, head, tunnel) for _ in range(count)))
    elapsed = time.perf_counter() - start
    if min(sizes) < size:
        raise SystemExit(f"a download was cut short: {min(sizes)} < {size} bytes")
    print(elapsed)


def timed(count: int, size: int, port: int, head: bytes, tunnel: bytes = b"") -> float:
    done = subprocess.run([sys.executable, __file__, "--role", "clients", "--clients", str(count),
                           "--size", str(size), "--port", str(port), "--head", head.decode(),
                           "--tunnel", tunnel.decode()], capture_output=True, text=True, check=True, timeout=600)
    return float(done.stdout)


def main(count: int, mib: int, rounds: int) -> None:
    from dsh.sandbox.net_proxy import ProxyThread
    from dsh.sandbox.net_rules import parse

    size = mib * 2**20

    async def resolver(name: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    server = subprocess.Popen([sys.executable, __file__, "--role", "server", "--size", str(size)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    up = int(server.stdout.readline())
    proxy = ProxyThread(parse(["bench.test"], allow_private_for=["bench.test"]), resolver=resolver)
    _, port = proxy.start()
    best = {"direct": float("inf"), "proxy, plain HTTP": float("inf"), "proxy, CONNECT": float("inf")}
    try:
        for _ in range(rounds):
            head = b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n"
            runs = {"direct": timed(count, size, up, head),
                    "proxy, plain HTTP": timed(count, size, port, f"GET http://bench.test:{up}/ HTTP/1.1\r\n\r\n"
                                               .encode()),
                    "proxy, CONNECT": timed(count, size, port, head, f"CONNECT bench.test:{up} HTTP/1.1\r\n\r\n"
                                            .encode())}
            for label, seconds in runs.items():
                best[label] = min(best[label], seconds)
    finally:
        proxy.close()
        server.communicate("")
    total = count * size / 2**20
    print(f"{count} clients x {mib} MiB = {total:.0f} MiB in all, best of {rounds} rounds")
    for label, seconds in best.items():
        print(f"{label:>18}: {seconds:6.2f} s  {total / seconds:8.0f} MiB/s  "
              f"{best['direct'] / seconds:.2f} of the direct throughput")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--mib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--role", choices=("main", "server", "clients"), default="main")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--head", default="")
    parser.add_argument("--tunnel", default="")
    args = parser.parse_args()
    if args.role == "server":
        asyncio.run(serve(args.size))
    elif args.role == "clients":
        unescape = lambda text: text.encode()  # noqa: E731
        asyncio.run(clients(args.clients, args.size, args.port, unescape(args.head), unescape(args.tunnel)))
    else:
        main(args.clients, args.mib, args.rounds)
