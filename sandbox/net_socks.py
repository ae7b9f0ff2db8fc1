"""The SOCKS5 side of the network proxy (RFC 1928, with RFC 1929's user and
password when the proxy asks for its session's credential): the greeting,
the method and the CONNECT request, read from a client into a ``Target``.
``sandbox/net_proxy.py`` serves it; the names it asks for are judged there.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress

from dsh.sandbox.net_heads import (
    SOCKS_BAD_ADDRESS,
    SOCKS_BAD_COMMAND,
    SOCKS_FAILURE,
    SOCKS_OK,
    Reject,
    Target,
    socks_reply,
)

_NO_AUTH, _USER_PASSWORD, _NONE_ACCEPTABLE = 0x00, 0x02, 0xFF


class Closed(Exception):
    """Ends a connection without an answer (the protocol has already given one)."""


async def socks_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, credential: str | None) -> Target:
    """The target of a SOCKS5 CONNECT whose version byte was read already.
    With ``credential``, the client must offer user/password and give it as
    the password (any user name).  Raises ``Reject`` (answered with its reply
    code) or ``Closed`` (answered already)."""
    count = (await reader.readexactly(1))[0]
    methods = await reader.readexactly(count)
    method = _NO_AUTH if credential is None else _USER_PASSWORD
    if method not in methods:
        writer.write(bytes([5, _NONE_ACCEPTABLE]))  # the client must close
        await writer.drain()
        raise Closed
    writer.write(bytes([5, method]))
    if credential is not None:
        version, size = await reader.readexactly(2)
        await reader.readexactly(size)  # the user name: any
        password = await reader.readexactly((await reader.readexactly(1))[0])
        ok = version == 1 and hmac.compare_digest(password, credential.encode())
        writer.write(b"\x01\x00" if ok else b"\x01\x01")
        await writer.drain()
        if not ok:
            raise Closed
    version, command, _, kind = await reader.readexactly(4)
    if version != 5:
        raise Reject(400, SOCKS_FAILURE, "not a SOCKS5 request")
    if kind == 1:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif kind == 4:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    elif kind == 3:
        raw = await reader.readexactly((await reader.readexactly(1))[0])
        try:
            host = raw.decode("utf-8")
        except UnicodeDecodeError:
            host = raw.decode("latin-1")  # Refused by name, but recorded as sent.
    else:
        raise Reject(400, SOCKS_BAD_ADDRESS, f"address type {kind} is unknown")
    port = int.from_bytes(await reader.readexactly(2), "big")
    if command != 1:
        # BIND and UDP ASSOCIATE would let the outside in or skip the name check.
        raise Reject(400, SOCKS_BAD_COMMAND, f"SOCKS5 command {command} is not supported (CONNECT only)")
    if port == 0:
        raise Reject(400, SOCKS_FAILURE, "port 0 is not a destination")
    return Target(host, port, reply=socks_reply(SOCKS_OK))
