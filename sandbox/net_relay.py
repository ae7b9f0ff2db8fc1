"""Bytes both ways between two connections the proxy holds, at the transports' level.

Once a tunnel is set up (the head read through ``asyncio`` streams), each
transport gets a small protocol that writes what it receives straight into the
other transport: no stream buffer in between, no task per direction, no timer
per read.  Flow control is the transports' own: when one transport's outgoing
buffer is full, the other stops reading until it drains, so a fast sender
never fills the host's memory.  One idle clock serves both directions (a long
download sends nothing the other way, and must not be taken for idle).

Through the proxy's stream code this relay moved about 0.7 of the direct
throughput of 50 concurrent loopback downloads; relayed here, the proxy is
no longer what bounds them (``tests/bench_net_proxy.py``).
"""

from __future__ import annotations

import asyncio
import contextlib


class Activity:
    """When a connection last moved a byte (the loop's clock): its idle timer,
    and what the proxy compares when it must make room."""

    __slots__ = ("last",)

    def __init__(self, last: float) -> None:
        self.last = last


class _Tunnel:
    """What both halves share: the idle clock and the end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, activity: Activity) -> None:
        self.loop = loop
        self.activity = activity
        self.ended: asyncio.Future[None] = loop.create_future()
        self._eofs = 0

    def eof(self) -> None:
        self._eofs += 1
        if self._eofs == 2:
            self.end()  # both sides finished sending

    def end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


class _Half(asyncio.Protocol):
    """Installed on one transport: what it receives goes to ``peer``."""

    def __init__(self, own: asyncio.Transport, peer: asyncio.Transport, old: asyncio.BaseProtocol,
                 tunnel: _Tunnel) -> None:
        self.own = own
        self._peer = peer
        self._old = old  # the stream's protocol: told of the end, so its writer's wait_closed returns
        self._tunnel = tunnel
        self._eof = False

    def data_received(self, data: bytes) -> None:
        self._tunnel.activity.last = self._tunnel.loop.time()
        if not self._peer.is_closing():
            self._peer.write(data)

    def eof_received(self) -> bool:
        self.ended_sending()
        # Stay open: the answer may still be coming the other way.  TLS has no
        # half-close: its transport closes (asking to stay open only warns).
        return self.own.can_write_eof()

    def ended_sending(self) -> None:
        if self._eof:
            return
        self._eof = True
        # Half-close: the other side may still be sending its answer.
        if self._peer.can_write_eof() and not self._peer.is_closing():
            with contextlib.suppress(OSError):
                self._peer.write_eof()
        self._tunnel.eof()

    def pause_writing(self) -> None:
        # This transport's outgoing buffer is full of the peer's bytes: stop reading the peer.
        self._peer.pause_reading()

    def resume_writing(self) -> None:
        if not self._peer.is_closing():
            self._peer.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._old.connection_lost(exc)
        self._tunnel.end()  # a side that went away ends the other


def _install(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: asyncio.StreamWriter,
             tunnel: _Tunnel) -> tuple[_Half, bytes, bool]:
    """Put a ``_Half`` on ``writer``'s transport; what its stream had already
    read (sent on by the caller) and whether that stream had ended."""
    transport = writer.transport
    assert isinstance(transport, asyncio.Transport)
    assert isinstance(peer.transport, asyncio.Transport)
    half = _Half(transport, peer.transport, transport.get_protocol(), tunnel)
    transport.set_protocol(half)
    # The stream read ahead of the head: those bytes belong to the tunnel.
    # (``_buffer`` and ``_eof`` are the stream's own; no public call hands
    # over what is buffered without waiting for more.)
    buffered: bytearray = getattr(reader, "_buffer")  # noqa: B009
    pending = bytes(buffered)
    buffered.clear()
    return half, pending, bool(getattr(reader, "_eof")) or reader.exception() is not None  # noqa: B009


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
                upstream: asyncio.StreamWriter, idle_timeout: float, activity: Activity | None = None) -> None:
    """Relay until both sides have finished sending, or one went away; raises
    ``TimeoutError`` when neither sent anything for ``idle_timeout``.  The
    caller closes both writers after."""
    loop = asyncio.get_running_loop()
    activity = activity or Activity(loop.time())
    activity.last = loop.time()
    tunnel = _Tunnel(loop, activity)
    client, from_client, client_ended = _install(reader, writer, upstream, tunnel)
    server, from_server, server_ended = _install(up_reader, upstream, writer, tunnel)
    for half, pending, ended in ((client, from_client, client_ended), (server, from_server, server_ended)):
        if pending:
            half.data_received(pending)
        if ended:
            half.ended_sending()
        if half.own.is_closing():
            tunnel.end()
    for half in (client, server):
        # A stream that paused reading over its own limit: the tunnel reads again.
        if not half.own.is_closing():
            half.own.resume_reading()
    for half in (client, server):
        # A buffer already over its mark gets no new pause call: pause its source now.
        if half.own.get_write_buffer_size() > half.own.get_write_buffer_limits()[1]:
            half.pause_writing()
    while not tunnel.ended.done():
        remaining = activity.last + idle_timeout - loop.time()
        if remaining <= 0:
            raise TimeoutError
        await asyncio.wait([tunnel.ended], timeout=remaining)
