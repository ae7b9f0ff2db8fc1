"""A proxy other users' processes can reach (on the host's loopback, as
Landlock's is) serves only clients with the session's credential: HTTP
``Proxy-Authorization: Basic``, SOCKS5 user/password (RFC 1929).  Without it
nothing is resolved, connected or recorded as a refused host."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator

from dsh.sandbox.net_proxy import NetworkProxy

from tests.sandbox.test_net_proxy import FAST, RULES, Resolver, echoes, exchange, run, socks_name, upstream

CREDENTIAL = "session-password-0123"


@contextlib.asynccontextmanager
async def guarded() -> AsyncIterator[tuple[NetworkProxy, int]]:
    p = NetworkProxy(RULES, resolver=Resolver(), limits=FAST, credential=CREDENTIAL)
    _, port = await p.start()
    try:
        yield p, port
    finally:
        await p.close()


def basic(user: str, password: str) -> str:
    return "Proxy-Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() + "\r\n"


def test_http_clients_need_the_credential() -> None:
    async def test() -> None:
        async with upstream() as up, guarded() as (p, port):
            target = f"allowed.test:{up.port}"
            for auth in ("", basic("dsh", "wrong"), "Proxy-Authorization: Bearer " + CREDENTIAL + "\r\n",
                         "Proxy-Authorization: Basic !!!\r\n"):
                reader, writer = await exchange(port, f"CONNECT {target} HTTP/1.1\r\n{auth}\r\n".encode())
                answer = await reader.read()
                assert answer.startswith(b"HTTP/1.1 407 "), answer
                assert b'Proxy-Authenticate: Basic realm="dsh-sandbox"\r\n' in answer
                writer.close()
            plain = f"GET http://{target}/ HTTP/1.1\r\n\r\n".encode()
            reader, writer = await exchange(port, plain)
            assert (await reader.read()).startswith(b"HTTP/1.1 407 ")
            writer.close()
            assert up.clients == 0 and p.refusals == ()  # nothing reached, no host reported
            # Any user name, the session's password: the tunnel opens.
            reader, writer = await exchange(port, f"CONNECT {target} HTTP/1.1\r\n{basic('x', CREDENTIAL)}\r\n".encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            assert await echoes(reader, writer)

    run(test)


def test_socks5_clients_need_the_credential() -> None:
    async def test() -> None:
        async with upstream() as up, guarded() as (p, port):
            # No user/password method offered: turned away.
            reader, writer = await exchange(port, b"\x05\x01\x00")
            assert await reader.readexactly(2) == b"\x05\xff"
            assert await reader.read() == b""
            writer.close()
            # The wrong password: the sub-negotiation fails and the connection ends.
            reader, writer = await exchange(port, b"\x05\x02\x00\x02\x01\x03dsh\x05wrong")
            assert await reader.readexactly(2) == b"\x05\x02"
            assert await reader.readexactly(2) == b"\x01\x01"
            assert await reader.read() == b""
            writer.close()
            assert up.clients == 0 and p.refusals == ()
            word = CREDENTIAL.encode()
            reader, writer = await exchange(port, b"\x05\x01\x02\x01\x03dsh" + bytes([len(word)]) + word
                                            + socks_name("allowed.test", up.port))
            assert await reader.readexactly(2) == b"\x05\x02"
            assert await reader.readexactly(2) == b"\x01\x00"
            assert (await reader.readexactly(10))[1] == 0
            assert await echoes(reader, writer)

    run(test)


def test_without_a_credential_no_client_is_asked_for_one() -> None:
    # The namespaced runners' proxy: only the sandbox reaches it.
    async def test() -> None:
        async with upstream() as up:
            p = NetworkProxy(RULES, resolver=Resolver(), limits=FAST)
            _, port = await p.start()
            try:
                reader, writer = await exchange(port, f"CONNECT allowed.test:{up.port} HTTP/1.1\r\n\r\n".encode())
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
                assert await echoes(reader, writer)
            finally:
                await p.close()
            await asyncio.sleep(0)

    run(test)
