"""The bytes of the network proxy's protocols that need no socket: an HTTP
proxy request head parsed into a target and the head to forward, and the
answers (HTTP error responses, SOCKS5 replies).  ``sandbox/net_proxy.py``
reads and writes them; keeping them here keeps the server small and lets
each parse be checked without a connection.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass

from dsh.sandbox.net_rules import HostError, split_host_port

#: Headers about one hop, not the request: never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)
# SOCKS5 reply codes (RFC 1928, section 6).
SOCKS_OK, SOCKS_FAILURE, SOCKS_NOT_ALLOWED, SOCKS_UNREACHABLE, SOCKS_REFUSED = 0x00, 0x01, 0x02, 0x04, 0x05
SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 0x07, 0x08
CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"

_STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
}


@dataclass(frozen=True)
class Target:
    """What a request head asks for: where to, what to send there first, and
    what to tell the client once connected."""

    host: str
    port: int
    forward: bytes = b""
    reply: bytes = b""


class Reject(Exception):
    """Ends a connection with an answer: an HTTP status and a SOCKS5 reply code."""

    def __init__(self, status: int, socks: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.socks, self.reason = status, socks, reason


def http_answer(reject: Reject) -> bytes:
    """The HTTP response that tells a client why its request ends here."""
    body = f"dsh-sandbox proxy: {reject.reason}\n".encode()
    text = _STATUS_TEXT.get(reject.status, "Error")
    challenge = 'Proxy-Authenticate: Basic realm="dsh-sandbox"\r\n' if reject.status == 407 else ""
    head = (
        f"HTTP/1.1 {reject.status} {text}\r\n{challenge}Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def authorized(header_lines: list[bytes], credential: str) -> bool:
    """Does the head carry ``Proxy-Authorization: Basic`` with ``credential``
    as the password (any user name), as a client sends it from the
    ``http://user:password@host:port`` in its proxy variable?"""
    for raw in header_lines:
        name, _, value = raw.decode("latin-1").partition(":")
        scheme, _, token = value.strip().partition(" ")
        if name.strip().lower() != "proxy-authorization" or scheme.lower() != "basic":
            continue
        try:
            decoded = base64.b64decode(token.strip(), validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(decoded.partition(b":")[2], credential.encode()):
            return True
    return False


def socks_reply(code: int) -> bytes:
    """A SOCKS5 reply; the bound address is left zero, as clients ignore it."""
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


def _text(raw: bytes) -> str:
    """A head line as text; bytes no header holds are a malformed request."""
    text = raw.rstrip(b"\r\n").decode("latin-1")
    if any((c < " " and c != "\t") or c == "\x7f" for c in text):
        raise Reject(400, SOCKS_FAILURE, "the request head holds control characters")
    return text


def _headers(header_lines: list[bytes]) -> list[tuple[str, str]]:
    """(name, value) of each header line; a malformed one is a 400."""
    headers: list[tuple[str, str]] = []
    for raw in header_lines:
        name, colon, value = _text(raw).partition(":")
        if not colon or not name or name != name.strip():
            raise Reject(400, SOCKS_FAILURE, "a header line is malformed")
        headers.append((name, value.strip()))
    return headers


def authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``split_host_port`` with its refusal as a 400 (SOCKS5: general failure)."""
    try:
        return split_host_port(text, default_port)
    except HostError as e:
        raise Reject(400, SOCKS_FAILURE, str(e)) from None


def parse_http_head(line: bytes, header_lines: list[bytes]) -> Target:
    """The target of ``CONNECT host:port`` or of an absolute ``http://`` request,
    and for the latter the head to send upstream in origin form."""
    headers = _headers(header_lines)
    parts = _text(line).split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[0].isalpha():
        raise Reject(400, SOCKS_FAILURE, "the request line is not 'METHOD target HTTP/1.x'")
    method, target, version = parts
    if method == "CONNECT":
        host, port = authority(target, None)
        return Target(host, port, reply=CONNECTED)
    if target[:7].lower() != "http://":
        raise Reject(400, SOCKS_FAILURE, "only absolute http:// targets are proxied; use CONNECT for https")
    rest = target[7:]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    where, path = rest[:cut], rest[cut:].split("#", 1)[0]
    host, port = authority(where, 80)
    # Headers the client named in Connection are hop-by-hop too.
    listed = {t.strip().lower() for n, v in headers if n.lower() == "connection" for t in v.split(",")}
    kept = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP | listed and n.lower() != "host"]
    # The upstream sees the host it was chosen for, not a Host the client may
    # have set to something else.  One request per connection: the upstream
    # closes after answering, so the client cannot reuse the tunnel for a
    # request to another host.
    head = [f"{method} {'/' if not path.startswith('/') else ''}{path} {version}", f"Host: {where}"]
    head += [f"{n}: {v}" for n, v in kept] + ["Connection: close", "", ""]
    return Target(host, port, forward="\r\n".join(head).encode("latin-1"))


#: Headers that describe one connection, never sent on (RFC 9110, 7.6.1).
_CONNECTION_HEADERS = {"connection", "keep-alive", "proxy-connection"}


#: Headers by which a front end may route a request to a host other than the
#: one in ``Host``: a request the proxy may put a secret in must not carry one.
_HOST_OVERRIDES = frozenset({
    "forwarded", "x-forwarded-host", "x-forwarded-server", "x-host", "x-original-host",
    "x-http-host-override", "x-original-url", "x-rewrite-url",
})
#: Methods whose answer repeats the request, the secret's value included.
_ECHOING_METHODS = frozenset({"TRACE", "TRACK", "CONNECT"})


def origin_head(line: bytes, header_lines: list[bytes], host: str, port: int) -> bytes:
    """A request inside a TLS tunnel the proxy terminates for ``host``:``port``
    (origin form: ``GET /path HTTP/1.1``), as sent on: CRLF line ends, the
    connection's own headers dropped and ``Connection: close`` added, so one
    connection carries one request the proxy has read.

    ``Host`` is the tunnel's host, whatever the client wrote: a shared front
    end routes by it, and a value put in the request must go where the
    certificate was checked.  Headers that name another host, and methods
    whose answer echoes the request, are refused."""
    parts = _text(line).split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[0].isalpha() \
            or not parts[1].startswith(("/", "*")):
        raise Reject(400, SOCKS_FAILURE, "the request line is not 'METHOD /path HTTP/1.x'")
    if parts[0].upper() in _ECHOING_METHODS:
        raise Reject(403, SOCKS_NOT_ALLOWED, f"{parts[0]} to a host a secret is for: its answer echoes the request")
    headers = _headers(header_lines)
    overriding = sorted({n.lower() for n, _ in headers} & _HOST_OVERRIDES)
    if overriding:
        raise Reject(403, SOCKS_NOT_ALLOWED,
                     f"a request to a host a secret is for names another host ({overriding[0]})")
    listed = {t.strip().lower() for n, v in headers if n.lower() == "connection" for t in v.split(",")}
    kept = [f"{n}: {v}" for n, v in headers if n.lower() not in _CONNECTION_HEADERS | listed | {"host"}]
    shown = f"[{host}]" if ":" in host else host
    pinned = f"Host: {shown}" if port == 443 else f"Host: {shown}:{port}"
    return "\r\n".join([" ".join(parts), pinned, *kept, "Connection: close", "", ""]).encode("latin-1")
