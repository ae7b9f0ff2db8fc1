"""The proxy's request heads without a socket (``sandbox/net_heads.py``): the
target a head asks for, the origin-form head forwarded, and the 400s."""

from __future__ import annotations

import pytest
from dsh.sandbox.net_heads import CONNECTED, Reject, Target, http_answer, parse_http_head, socks_reply
from hypothesis import given, settings
from hypothesis import strategies as st


def test_connect_head() -> None:
    assert parse_http_head(b"CONNECT [::1]:443 HTTP/1.1\r\n", [b"Host: x\r\n"]) == Target("::1", 443, reply=CONNECTED)


@pytest.mark.parametrize(
    ("target", "host", "port", "request_line"),
    [
        ("http://a.test/x?y=1#f", "a.test", 80, "GET /x?y=1 HTTP/1.1"),
        ("HTTP://a.test:8080", "a.test", 8080, "GET / HTTP/1.1"),
        ("http://a.test?q", "a.test", 80, "GET /?q HTTP/1.1"),
        ("http://[::1]:81/", "::1", 81, "GET / HTTP/1.1"),
    ],
)
def test_absolute_form_is_forwarded_in_origin_form(target: str, host: str, port: int, request_line: str) -> None:
    parsed = parse_http_head(f"GET {target} HTTP/1.1\r\n".encode(), [b"Host: other\r\n", b"Accept: */*\r\n"])
    assert (parsed.host, parsed.port, parsed.reply) == (host, port, b"")
    lines = parsed.forward.decode().split("\r\n")
    assert lines[0] == request_line
    assert lines[1] == "Host: " + target[7:].split("/")[0].split("?")[0].split("#")[0]
    assert lines[2:] == ["Accept: */*", "Connection: close", "", ""]


@pytest.mark.parametrize(
    ("line", "headers"),
    [
        (b"GET http://a.test/ HTTP/2\r\n", []),
        (b"GET  http://a.test/ HTTP/1.1\r\n", []),
        (b"G3T http://a.test/ HTTP/1.1\r\n", []),
        (b"GET ftp://a.test/ HTTP/1.1\r\n", []),
        (b"GET http://a.test/ HTTP/1.1\r\n", [b"Folded: a\r\n", b" continued\r\n"]),
        (b"GET http://a.test/ HTTP/1.1\r\n", [b"Space : a\r\n"]),
        (b"GET http://a.test/ HTTP/1.1\r\n", [b"Bell: \x07\r\n"]),
        (b"GET http://a.test\x7f/ HTTP/1.1\r\n", []),
        (b"GET http://u@a.test/ HTTP/1.1\r\n", []),
    ],
)
def test_malformed_heads_are_400(line: bytes, headers: list[bytes]) -> None:
    with pytest.raises(Reject) as caught:
        parse_http_head(line, headers)
    assert caught.value.status == 400


def test_answers() -> None:
    answer = http_answer(Reject(403, 2, "name x.test is not in the network allowlist"))
    head, body = answer.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    assert body == b"dsh-sandbox proxy: name x.test is not in the network allowlist\n"
    assert socks_reply(2) == b"\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00"


HEAD_BYTES = st.binary(max_size=200) | st.sampled_from(
    [b"CONNECT ", b"GET http://", b"[", b"]", b":", b"@", b" HTTP/1.1", b"\x00", b"\r", b"%", b".", b"0x7f"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(HEAD_BYTES, max_size=8).map(b"".join), st.lists(st.binary(max_size=40), max_size=4))
def test_any_head_parses_or_is_a_400(line: bytes, headers: list[bytes]) -> None:
    try:
        target = parse_http_head(line, headers)
    except Reject as reject:
        assert reject.status == 400
    else:
        assert 0 < target.port < 65536 and target.host
