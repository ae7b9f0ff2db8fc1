"""``dsh-sandbox mcp --http ADDR``: the same server over streamable HTTP.

One process serves any number of clients, each an MCP session of its own:
what a session starts (jobs, terminals, the persistent shell) belongs to it
alone, and ends when the session does, by the client's ``DELETE`` or after
``idle_s`` without a request in flight (a client that vanished).  Closing the
server ends everything.

Every request must carry ``Authorization: Bearer <token>`` (compared in
constant time); anything else gets 401 before the MCP transport sees it.  On
a loopback address the SDK's DNS-rebinding check also holds the ``Host`` and
``Origin`` headers to loopback names, so a web page the user visits cannot
drive the server through the browser.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from dsh.cli.mcp_server import SESSION_HEADER, build_server
from dsh.sandbox.context import Context
from dsh.sandbox.errors import UsageError

#: The path the MCP endpoint is served at (the SDK's default).
ENDPOINT = "/mcp"
#: Ended sessions remembered (a request naming one is refused); the SDK
#: answers any older or made-up one with 404 all the same.
ENDED_KEPT = 10_000
#: Shortest token accepted from the environment: a guessable one is no lock.
MIN_TOKEN_CHARS = 16

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def parse_address(text: str) -> tuple[str, int]:
    """``PORT``, ``:PORT``, ``HOST:PORT`` or ``[IPV6]:PORT``; the host defaults
    to 127.0.0.1 (loopback unless told otherwise), port 0 picks a free one."""
    host, port_text = "127.0.0.1", text
    if text.startswith("["):
        end = text.find("]")
        if end == -1 or not text[end + 1 :].startswith(":"):
            raise UsageError(f"--http {text!r}: write an IPv6 address as [ADDR]:PORT, e.g. [::1]:8765")
        host, port_text = text[1:end], text[end + 2 :]
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
        host = host or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--http {text!r}: the port must be a number from 0 to 65535 (0 picks a free one), "
                         "e.g. --http 127.0.0.1:8765")
    return host, int(port_text)


#: The header naming a request's protocol version.
VERSION_HEADER = "mcp-protocol-version"


def session_versions() -> tuple[str, ...]:
    """The protocol versions whose clients open an MCP session (the handshake era)."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    return tuple(HANDSHAKE_PROTOCOL_VERSIONS)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    # ::ffff:127.0.0.1 is loopback too (Python says so only from 3.13).
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def loopback_names(host: str, port: int) -> tuple[list[str], list[str]]:
    """The Host and Origin values a loopback server accepts: the loopback
    names and the address it is bound to, on its port."""
    names = ["127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host]
    hosts = list(dict.fromkeys(f"{name}:{port}" for name in names))
    return hosts, [f"http://{h}" for h in hosts]


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server starts (so a taken port
    is a clear error and port 0's choice is known)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--http {host}:{port}: the host cannot be resolved ({exc.strerror}); "
                         "give an address, e.g. 127.0.0.1:8765") from None
    family, _type, _proto, _name, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise UsageError(f"--http {host}:{port}: cannot listen there ({exc.strerror or exc}); "
                         "choose another port, or 0 for a free one") from None
    sock.set_inheritable(False)
    return sock


class Sessions:
    """When each client session was last active, and which ones ended: a
    session ends at its ``DELETE``, or once ``idle_s`` pass with no request
    of it in flight; ``release`` is then called with it, once."""

    def __init__(self, idle_s: float, release: Callable[[str], None]) -> None:
        self.idle_s = idle_s
        self._release = release
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._ended: dict[str, None] = {}  # oldest first, at most ENDED_KEPT
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sweep, name="dsh-mcp-idle", daemon=True)
        self._thread.start()

    def begin(self, session: str) -> bool:
        """A request of ``session`` starts; False when it already ended."""
        with self._lock:
            if session in self._ended:
                return False
            self._busy[session] = self._busy.get(session, 0) + 1
            self._last[session] = time.monotonic()
            return True

    def done(self, session: str) -> None:
        with self._lock:
            self._busy[session] = max(0, self._busy.get(session, 1) - 1)
            self._last[session] = time.monotonic()

    def end(self, session: str) -> None:
        with self._lock:
            if session in self._ended:
                return
            self._ended[session] = None
            while len(self._ended) > ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
            self._busy.pop(session, None)
            self._last.pop(session, None)
        self._release(session)

    def _sweep(self) -> None:
        while not self._stop.wait(min(5.0, max(0.2, self.idle_s / 4))):
            now = time.monotonic()
            with self._lock:
                idle = [s for s, t in self._last.items() if not self._busy.get(s) and now - t >= self.idle_s]
            for session in idle:
                self.end(session)

    def close(self) -> None:
        self._stop.set()


def guard(inner: App, token: str, sessions: Sessions) -> App:
    """The bearer-token check and the session bookkeeping around ``inner``."""
    expected = token.encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)  # lifespan: the SDK's session manager starts there
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        # The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
        if not (hmac.compare_digest(given, expected) and scheme.lower() == b"bearer"):
            await _refuse(send, 401, b"missing or wrong bearer token (Authorization: Bearer <token>)")
            return
        version = headers.get(VERSION_HEADER.encode(), b"").decode("latin-1")
        if version and version not in session_versions():
            # Such requests carry no MCP session, and a client's jobs,
            # terminals and shell are its session's: all of them would share
            # one owner, and any client could name another's.
            await _refuse(send, 400, (f"protocol {version} has no MCP session, which this server keeps each "
                                      "client's jobs and terminals in; use one of "
                                      f"{', '.join(session_versions())}").encode("latin-1", "replace"))
            return
        session = headers.get(SESSION_HEADER.encode(), b"").decode("latin-1")
        if session and not sessions.begin(session):
            await _refuse(send, 404, b"this MCP session has ended; initialize a new one")
            return
        try:
            await inner(scope, receive, send)
        finally:
            if session:
                sessions.done(session)
                if scope.get("method") == "DELETE":
                    import anyio.to_thread

                    await anyio.to_thread.run_sync(sessions.end, session)

    return app


async def _refuse(send: Send, status: int, text: bytes) -> None:
    extra = [(b"www-authenticate", b'Bearer realm="dsh-sandbox"')] if status == 401 else []
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *extra]})
    await send({"type": "http.response.body", "body": text + b"\n"})


def serve_http(ctx: Context, *, owner: str, max_concurrent: int, sock: socket.socket, token: str,
               idle_s: float) -> None:
    """Serve ``ctx``'s tools on ``sock`` until stopped; every session's jobs and
    terminals end with the session."""
    import uvicorn
    from dsh.tools.toolbox import release_owner
    from mcp.server.transport_security import TransportSecuritySettings

    host, port = sock.getsockname()[:2]
    server = build_server(ctx, owner=owner, max_concurrent=max_concurrent)
    # Loopback: Host and Origin must name it (DNS rebinding: a page whose own
    # name now resolves to 127.0.0.1).  Elsewhere the names clients use are
    # unknown here; the token guards it.
    if is_loopback(host):
        hosts, origins = loopback_names(host, port)
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                             allowed_origins=origins)
    else:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    inner = server.streamable_http_app(streamable_http_path=ENDPOINT, host=host, session_idle_timeout=idle_s,
                                       transport_security=security)

    def release(session: str) -> None:
        release_owner(ctx, f"{owner}:{session}")

    sessions = Sessions(idle_s, release)
    config = uvicorn.Config(guard(inner, token, sessions), log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=5)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sessions.close()
