"""The host-side network proxy: the one way out for a sandboxed command whose
network is limited to an allowlist (``sandbox/net_rules.py``).

It speaks what clients speak to a proxy: HTTP ``CONNECT`` (every HTTPS client),
plain HTTP in absolute form (``GET http://host/ HTTP/1.1``) and SOCKS5 (CONNECT
only), told apart by the first byte (0x05 is SOCKS5).  For each target it
checks the name, resolves it itself, checks every address, then connects to
an address it checked: the name is never handed to a second resolver, so a
short-TTL record cannot point elsewhere between the check and the connect.

Every refusal is answered (403, or SOCKS5 reply 0x02) and recorded in
``refusals`` so the owner can tell the user what was blocked.  Input is
hostile: the head of a request is capped in size and in time, and an error in
one connection closes that connection only.

asyncio is imported here and in the modules only this one imports (the relay,
the SOCKS5 side): the CLI starts without it, and the synchronous runners use
``ProxyThread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.sandbox.net_heads import (
    CONNECTED,
    SOCKS_FAILURE,
    SOCKS_NOT_ALLOWED,
    SOCKS_REFUSED,
    SOCKS_UNREACHABLE,
    Reject,
    Target,
    authorized,
    http_answer,
    origin_head,
    parse_http_head,
    socks_reply,
)
from dsh.sandbox.net_relay import Activity, relay
from dsh.sandbox.net_rules import NetworkRules, decide_addresses, decide_name, normalise_host
from dsh.sandbox.net_socks import Closed, socks_head

if TYPE_CHECKING:
    from dsh.sandbox.net_secrets import Secrets, SessionCA

Resolver = Callable[[str, int], Awaitable[list[str]]]

_TASK_NAME = "dsh-net-proxy-connection"


@dataclass(frozen=True)
class Refusal:
    """One connection the rules refused: the host as asked for (at most
    ``NAME_SHOWN`` characters: no DNS name is longer), and why."""

    name: str
    reason: str


#: The longest host name a refusal keeps (a DNS name has at most 253).
NAME_SHOWN = 255
#: The most names one command's report lists.
NAMES_REPORTED = 100


def refused_names(refusals: Iterable[Refusal]) -> tuple[str, ...]:
    """The names of ``refusals``, each once, in order, at most ``NAMES_REPORTED``:
    a command that asks for a thousand made-up names gets a report, not a flood."""
    names: dict[str, None] = {}
    for refusal in refusals:
        names.setdefault(refusal.name)
        if len(names) == NAMES_REPORTED:
            break
    return tuple(names)


@dataclass(frozen=True)
class ProxyLimits:
    """Bounds on what one client may make the proxy hold or wait for."""

    #: The whole head (request line and headers, or the SOCKS5 handshake).
    head_timeout: float = 10.0
    max_head_bytes: int = 64 * 1024
    max_request_line: int = 8 * 1024
    max_connections: int = 256
    #: At the cap, the connection quiet the longest gives way to a new one if
    #: it has been quiet this long; otherwise the new one is turned away.
    busy_grace: float = 2.0
    resolve_timeout: float = 10.0
    connect_timeout: float = 10.0
    #: A tunnel with no byte either way for this long is closed.
    idle_timeout: float = 600.0
    max_refusals: int = 1000


async def system_resolver(name: str, port: int) -> list[str]:
    """The host's resolver: every address of ``name`` for a TCP connect."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class NetworkProxy:
    """An allowlist-enforcing HTTP and SOCKS5 proxy on one loopback port."""

    def __init__(
        self,
        rules: NetworkRules,
        host: str = "127.0.0.1",
        port: int = 0,
        resolver: Resolver | None = None,
        limits: ProxyLimits | None = None,
        sock: socket.socket | None = None,
        secrets: Secrets | None = None,
        ca: SessionCA | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        credential: str | None = None,
    ) -> None:
        """``secrets``, ``ca``: the session's secrets, and the CA whose
        certificates the proxy presents for their hosts (TLS it terminates, to
        put each value in place of its placeholder); ``upstream_tls``: how it
        checks those hosts' own certificates (the system's trust unless given).
        ``credential``: the password every client must give (HTTP
        ``Proxy-Authorization: Basic``, SOCKS5 user/password), for a proxy
        that other users' processes can reach (on the host's loopback)."""
        if (secrets is None) != (ca is None):
            raise ValueError("secrets need the session's CA, and a CA serves only secrets")
        self._credential = credential
        self._secrets, self._ca = secrets, ca
        self._upstream_tls = upstream_tls
        self._rules = rules
        self._host, self._port = host, port
        # A socket already listening (in a sandbox's own network namespace,
        # where the command reaches nothing else): served instead of host:port.
        self._sock = sock
        self._resolve = resolver or system_resolver
        self._limits = limits or ProxyLimits()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # The connections that count against the cap (one being evicted no longer does).
        self._activity: dict[asyncio.Task[None], Activity] = {}
        self._refusals: deque[Refusal] = deque(maxlen=self._limits.max_refusals)
        self._refused = 0  # every refusal ever, kept or not: the mark ``refusals_since`` counts from
        # Refusals are read from the owner's thread when the loop runs in another.
        self._lock = threading.Lock()

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        """The latest refusals, oldest first (at most ``max_refusals``)."""
        with self._lock:
            return tuple(self._refusals)

    @property
    def refused(self) -> int:
        """How many connections were refused so far: a mark for ``refusals_since``."""
        with self._lock:
            return self._refused

    def refusals_since(self, mark: int) -> tuple[Refusal, ...]:
        """The refusals after ``mark`` (a value of ``refused``), oldest first, as many as are kept."""
        with self._lock:
            new = min(self._refused - mark, len(self._refusals))
            return tuple(self._refusals)[len(self._refusals) - new:] if new > 0 else ()

    async def start(self) -> tuple[str, int]:
        """Listen; returns the address clients should use."""
        if self._sock is not None:
            self._server = await asyncio.start_server(self._accept, sock=self._sock,
                                                      limit=self._limits.max_head_bytes + 1)
        else:
            self._server = await asyncio.start_server(
                self._accept, self._host, self._port, limit=self._limits.max_head_bytes + 1
            )
        address = self._server.sockets[0].getsockname()
        return str(address[0]), int(address[1])

    async def close(self) -> None:
        """Stop listening and end every connection; returns when none is left."""
        if self._server is not None:
            self._server.close()
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _refuse(self, name: str, reason: str) -> Reject:
        shown = name if len(name) <= NAME_SHOWN else name[:NAME_SHOWN - 3] + "..."
        with self._lock:
            self._refusals.append(Refusal(shown, reason))
            self._refused += 1
        return Reject(403, SOCKS_NOT_ALLOWED, reason)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        if len(self._activity) >= self._limits.max_connections:
            # The commands of a session share the proxy: one holding every slot
            # idle (or trickling a head) must not starve the others.  The
            # connection quiet the longest makes room, if it has been quiet a
            # while; when all are busy the new client is closed before a byte
            # is read (it holds a socket, never a task or a buffer).
            task, quiet = min(self._activity.items(), key=lambda item: item[1].last)
            if loop.time() - quiet.last < self._limits.busy_grace:
                writer.transport.abort()
                return
            del self._activity[task]
            task.cancel()
        activity = Activity(loop.time())
        task = loop.create_task(self._serve(reader, writer, activity), name=_TASK_NAME)
        self._tasks.add(task)
        self._activity[task] = activity
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._activity.pop(task, None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, activity: Activity) -> None:
        upstream: asyncio.StreamWriter | None = None
        socks = False
        try:
            try:
                # Only the client's own bytes are timed here: a slow upstream
                # has its own resolve and connect timeouts.
                async with asyncio.timeout(self._limits.head_timeout):
                    first = await reader.readexactly(1)
                    socks = first == b"\x05"
                    target = await (socks_head(reader, writer, self._credential) if socks
                                    else self._http_head(first, reader))
            except TimeoutError:
                raise Reject(408, SOCKS_FAILURE, "the request head did not arrive in time") from None
            intercept = self._intercepts(target, socks)
            up_reader, upstream = await self._open(target.host, target.port, tls=intercept)
            upstream.write(target.forward)
            writer.write(target.reply)
            await writer.drain()
            if intercept:
                await self._intercepted(reader, writer, upstream, target.host, target.port)
            await relay(reader, writer, up_reader, upstream, self._limits.idle_timeout, activity)
        except Reject as reject:
            await self._answer(writer, socks, reject)
        except (Closed, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # The client went away or stalled mid-tunnel: nothing to answer.
        finally:
            for w in (upstream, writer):
                if w is not None:
                    await _shut(w)

    def _intercepts(self, target: Target, socks: bool) -> bool:
        """Is ``target`` a host of a secret, whose TLS the proxy terminates?
        A plain-HTTP request carrying a placeholder is refused: a secret goes
        only over TLS, and only to its hosts."""
        if self._secrets is None:
            return False
        carried = self._secrets.carried(target.forward)
        if carried is not None:
            raise self._refuse(target.host, f"the placeholder of {carried} in a plain-HTTP request: a secret goes "
                                            "only over TLS, to its hosts")
        return not socks and target.reply == CONNECTED and self._secrets.intercepts(target.host)

    async def _intercepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           upstream: asyncio.StreamWriter, host: str, port: int) -> None:
        """Terminate the client's TLS with the session's certificate for
        ``host``, read its request head and send it on with each placeholder
        replaced where its rule allows; refuse it if a placeholder is anywhere
        else.  The rest of the connection is relayed as it comes."""
        assert self._secrets is not None and self._ca is not None
        name = normalise_host(host)
        try:
            async with asyncio.timeout(self._limits.head_timeout):
                await writer.start_tls(self._ca.server_context(name))
                line, headers = await self._read_head(await reader.readexactly(1), reader)
        except TimeoutError:
            raise Reject(408, SOCKS_FAILURE, "the request head did not arrive in time") from None
        try:
            origin = origin_head(line, headers, name, port)
        except Reject as reject:
            raise self._refuse(host, reject.reason) from None
        head, why = self._secrets.rewrite(origin, name)
        if why is not None:
            raise self._refuse(host, why)
        upstream.write(head)

    async def _answer(self, writer: asyncio.StreamWriter, socks: bool, reject: Reject) -> None:
        writer.write(socks_reply(reject.socks) if socks else http_answer(reject))
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(self._limits.head_timeout):
                await writer.drain()

    async def _open(self, host: str, port: int, *, tls: bool = False) -> tuple[asyncio.StreamReader,
                                                                               asyncio.StreamWriter]:
        """A connection to ``host``:``port`` once the rules allow the name and
        every address it resolves to (over TLS checked for the name when
        ``tls``); raises ``Reject`` otherwise."""
        decision = decide_name(self._rules, host)
        if not decision.allowed:
            raise self._refuse(host, decision.reason)
        name = normalise_host(host)
        try:
            ipaddress.ip_address(name)
            addresses = [name]
        except ValueError:
            try:
                async with asyncio.timeout(self._limits.resolve_timeout):
                    addresses = await self._resolve(name, port)
            except (OSError, TimeoutError) as e:
                raise Reject(502, SOCKS_UNREACHABLE, f"cannot resolve {name}: {e or 'timeout'}") from None
        decision = decide_addresses(self._rules, name, addresses)
        if not decision.allowed:
            raise self._refuse(host, decision.reason)
        failure = ""
        for address in addresses:
            try:
                async with asyncio.timeout(self._limits.connect_timeout):
                    # An address, never the name: no second lookup to rebind.
                    if not tls:
                        return await asyncio.open_connection(address, port, limit=2**16)
                    context = self._upstream_tls or ssl.create_default_context()
                    return await asyncio.open_connection(address, port, limit=2**16, ssl=context,
                                                         server_hostname=name)
            except (OSError, TimeoutError) as e:
                failure = f"{address}: {e or 'timeout'}"
        raise Reject(502, SOCKS_REFUSED, f"cannot connect to {name} port {port} ({failure})")

    async def _read_line(self, reader: asyncio.StreamReader, used: int) -> bytes:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise Reject(431, SOCKS_FAILURE, "the request head is too large") from None
        except asyncio.IncompleteReadError:
            raise Reject(400, SOCKS_FAILURE, "the request head ended early") from None
        if used + len(line) > self._limits.max_head_bytes:
            raise Reject(431, SOCKS_FAILURE, "the request head is too large")
        return line

    async def _http_head(self, first: bytes, reader: asyncio.StreamReader) -> Target:
        line, headers = await self._read_head(first, reader)
        if self._credential is not None and not authorized(headers, self._credential):
            # Not a refusal of a host: no name to report, and it may be another user's.
            raise Reject(407, SOCKS_NOT_ALLOWED, "this proxy serves only its session's commands: use the "
                                                 "credential in HTTP_PROXY")
        return parse_http_head(line, headers)

    async def _read_head(self, first: bytes, reader: asyncio.StreamReader) -> tuple[bytes, list[bytes]]:
        """The request line (its first byte read already) and the header lines."""
        line = first + await self._read_line(reader, 1)
        if len(line) > self._limits.max_request_line:
            raise Reject(414, SOCKS_FAILURE, "the request line is too long")
        used, headers = len(line), []
        while (raw := await self._read_line(reader, used)) not in (b"\r\n", b"\n"):
            used += len(raw)
            headers.append(raw)
        return line, headers


async def _shut(writer: asyncio.StreamWriter) -> None:
    """Close one side: flush what is queued, but never wait long on a peer
    that does not read (its unsent bytes are dropped)."""
    try:
        writer.close()
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    except (OSError, TimeoutError, asyncio.CancelledError, AttributeError):
        # AttributeError: a TLS transport whose client reset it mid-handshake
        # has no protocol left to close or abort; the socket is gone already.
        with contextlib.suppress(AttributeError, OSError):
            writer.transport.abort()


class ProxyThread:
    """A ``NetworkProxy`` on its own event loop in a daemon thread, for the
    synchronous runners: ``start()`` returns its address, ``close()`` joins."""

    def __init__(
        self,
        rules: NetworkRules,
        host: str = "127.0.0.1",
        port: int = 0,
        resolver: Resolver | None = None,
        limits: ProxyLimits | None = None,
        sock: socket.socket | None = None,
        *,
        secrets: Secrets | None = None,
        ca: SessionCA | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        credential: str | None = None,
    ) -> None:
        """``secrets``, ``ca``, ``upstream_tls``, ``credential``: as ``NetworkProxy`` takes them."""
        self._proxy = NetworkProxy(rules, host, port, resolver, limits, sock, secrets=secrets, ca=ca,
                                   upstream_tls=upstream_tls, credential=credential)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dsh-net-proxy", daemon=True)

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        return self._proxy.refusals

    @property
    def refused(self) -> int:
        return self._proxy.refused

    def refusals_since(self, mark: int) -> tuple[Refusal, ...]:
        return self._proxy.refusals_since(mark)

    def start(self, timeout: float = 30.0) -> tuple[str, int]:
        self._thread.start()
        try:
            return asyncio.run_coroutine_threadsafe(self._proxy.start(), self._loop).result(timeout)
        except BaseException:
            self.close(timeout)  # a port in use must not leave a thread behind
            raise

    def close(self, timeout: float = 30.0) -> None:
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._proxy.close(), self._loop).result(timeout)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()
