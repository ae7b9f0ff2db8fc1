"""The network allowlist: which names a sandboxed command may reach, and which
addresses those names may resolve to.  Pure: names and addresses, no I/O.

A name is checked twice by the proxy (``sandbox/net_proxy.py``): the name
before it is resolved (``decide_name``), then every address it resolved to
(``decide_addresses``).  The second check is what stops DNS rebinding: an
allowed public name whose record points at 127.0.0.1 or 10.0.0.1 would
otherwise open the host's own services and the local network to the command.

Entries:

* ``pypi.example.org``: that name exactly;
* ``*.example.com``: any name below ``example.com``, never ``example.com``
  itself (list both when both are wanted: the apex is often another service);
* ``203.0.113.7`` or ``2001:db8::7``: that address literal exactly.  Literals
  are never matched by a wildcard, and a literal asked for by a command is
  refused unless it is listed: an address skips every name rule.

``allow_private_for`` lists entries (same syntax, each also in ``allow``) whose
addresses may be private, loopback or link-local: a registry mirror on the
LAN.  An address literal listed in ``allow`` needs no such entry: it was asked
for by address, so no resolver can swap it (``127.0.0.1`` reaches the host's
loopback services: list it only to mean that).  A ``deny`` address is refused
after resolution too: a name that resolves to it is refused.  Unspecified (0.0.0.0, ::) and multicast
addresses are refused even then: connecting to 0.0.0.0 reaches the host's
loopback services under another spelling, and TCP has no use for multicast.

A name that only a resolver would read as an address (``2130706433``,
``0x7f.1``, ``127.1``: the last label numeric) is refused as a name: the C
resolver turns those into 127.0.0.1, so they are an address in disguise.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.lazy_pattern import LazyPattern

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: One label of a name after IDNA: letters, digits and inner hyphens
#: (underscores too: SRV-style and some internal names use them).
_LABEL = LazyPattern(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
#: A last label a resolver reads as a number: decimal, octal or hex.
_NUMERIC_LABEL = LazyPattern(r"^(?:[0-9]+|0x[0-9a-f]*)$")
#: Characters no host name or address literal holds; refused before IDNA,
#: which would otherwise map some of them (fullwidth forms) to ASCII.
_FORBIDDEN = set("\x00@/\\%?#[]<>\"'`{}|^ \t\r\n\v\f")
_MAX_NAME = 253


@dataclass(frozen=True)
class Decision:
    """Whether one name or address may be reached, and why in words."""

    allowed: bool
    reason: str


@dataclass(frozen=True)
class SecretRule:
    """One ``[[network.secrets]]`` entry (``dsh.sandbox.net_secrets``): ``env``,
    the host variable with the value; ``hosts``, normalised entries (each
    covered by the allowlist); ``header``, where the value may go."""

    env: str
    hosts: tuple[str, ...]
    header: str = "Authorization"


@dataclass(frozen=True)
class NetworkRules:
    """Normalised entries, built by ``parse``: names in IDNA ASCII lower case,
    wildcards as ``*.suffix``, address literals in ``ipaddress`` canonical form."""

    allow: tuple[str, ...]
    deny: tuple[str, ...] = ()
    allow_private_for: tuple[str, ...] = ()
    #: ``[[network.secrets]]``: values the proxy puts in requests to their hosts;
    #: the command sees only placeholders (``dsh.sandbox.net_secrets``).
    secrets: tuple[SecretRule, ...] = ()


class HostError(ValueError):
    """A host that is neither a valid name nor an address literal."""


def normalise_host(host: str) -> str:
    """The form a host is matched in: an address literal in canonical form, or
    the name lower-cased, one trailing dot dropped, IDNA-encoded to ASCII.

    Raises ``HostError`` for anything else (empty, forbidden characters, a
    label IDNA refuses, a numeric last label)."""
    if not host:
        raise HostError("empty host")
    bad = sorted({c for c in host if c in _FORBIDDEN or not c.isprintable()})
    if bad:
        raise HostError(f"host {host!r} holds {', '.join(repr(c) for c in bad)}")
    address = _address(host)
    if address is not None:
        return str(address)
    if ":" in host:
        raise HostError(f"host {host!r} holds ':' but is no IP address (a port belongs apart)")
    name = host[:-1] if host.endswith(".") else host
    try:
        # Python's codec is IDNA 2003: it also folds fullwidth dots and letters,
        # so each spelling of one name ends in one form and one rule.
        ascii_name = name.encode("idna").decode("ascii").lower()
    except UnicodeError as e:
        raise HostError(f"host {host!r} is not a valid IDNA name ({e})") from None
    labels = ascii_name.split(".")
    if len(ascii_name) > _MAX_NAME or not all(_LABEL.match(label) for label in labels):
        raise HostError(f"host {host!r} is not a valid name")
    if _NUMERIC_LABEL.match(labels[-1]):
        raise HostError(f"host {host!r} is a numeric address form, not a name; only dotted IPv4 is accepted")
    return ascii_name


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def normalised_entry(field: str, raw: object) -> str:
    """One normalised entry, or a ``ConfigError`` naming it and the fix."""
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{field}: {raw!r} is not a host name; write a name like 'pkgs.example.org' "
                          "or '*.example.com'")
    if raw != raw.strip() or any(c.isspace() for c in raw):
        raise ConfigError(f"{field}: {raw!r} holds whitespace; write the name alone")
    if "://" in raw:
        raise ConfigError(f"{field}: {raw!r} is a URL; write only its host name, without scheme or path")
    if "/" in raw:
        raise ConfigError(f"{field}: {raw!r} holds a path; write only the host name")
    if raw.startswith("[") or (raw.count(":") == 1 and _address(raw) is None):
        raise ConfigError(f"{field}: {raw!r} holds a port or brackets; write the bare host (rules apply to every port)")
    if raw == "*" or raw == "*.":
        if "deny" in field:
            raise ConfigError(f"{field}: {raw!r} would deny every host; to allow none, turn the network off "
                              "(write mode = \"off\" in [network], or pass --no-network)")
        raise ConfigError(f"{field}: {raw!r} would allow every host; list the names the command needs")
    wildcard = raw.startswith("*.")
    rest = raw[2:] if wildcard else raw
    if "*" in rest:
        raise ConfigError(
            f"{field}: {raw!r}: '*' is accepted only as a whole first label; write it as in '*.example.com'"
        )
    if wildcard and _address(rest.rstrip(".")) is not None:
        raise ConfigError(f"{field}: {raw!r}: a wildcard cannot cover addresses; list each address")
    try:
        host = normalise_host(rest)
    except HostError as e:
        raise ConfigError(f"{field}: {raw!r}: {e}; write a name like 'pkgs.example.org', '*.example.com' "
                          "or an IP") from None
    literal = _address(host)
    if isinstance(literal, ipaddress.IPv6Address) and _embedded_ipv4(literal) is not None:
        raise ConfigError(f"{field}: {raw!r} carries the IPv4 address {_embedded_ipv4(literal)}; write that "
                          "address instead (a rule on one spelling would miss the other)")
    if literal is not None and (literal.is_unspecified or literal.is_multicast):
        raise ConfigError(f"{field}: {raw!r} is an unspecified or multicast address, which no connection may "
                          "use (0.0.0.0 reaches the host's own services); name the host's real address")
    if wildcard and "." not in host:
        raise ConfigError(f"{field}: {raw!r} covers a whole top-level domain; name the domain, as in '*.example.com'")
    return f"*.{host}" if wildcard else host


def parse(allow: Iterable[str], deny: Iterable[str] = (), allow_private_for: Iterable[str] = ()) -> NetworkRules:
    """Validated, normalised rules; ``ConfigError`` names the first bad entry."""
    allowed = tuple(dict.fromkeys(normalised_entry("network.allow", e) for e in allow))
    denied = tuple(dict.fromkeys(normalised_entry("network.deny", e) for e in deny))
    private = tuple(dict.fromkeys(normalised_entry("network.allow_private_for", e) for e in allow_private_for))
    for entry in private:
        if entry not in allowed:
            raise ConfigError(
                f"network.allow_private_for: {entry!r} is not in network.allow; "
                "add it there too (this list only lets an allowed entry reach private addresses)"
            )
    return NetworkRules(allow=allowed, deny=denied, allow_private_for=private)


def _matches(entries: tuple[str, ...], host: str) -> str | None:
    """The first entry that covers ``host`` (already normalised), if any."""
    is_address = _address(host) is not None
    for entry in entries:
        if entry == host:
            return entry
        if not is_address and entry.startswith("*.") and host.endswith(entry[1:]):
            return entry
    return None


def decide_name(rules: NetworkRules, host: str) -> Decision:
    """May ``host`` (a name or an address literal, as the command gave it) be
    resolved and connected to?  ``deny`` beats ``allow``."""
    try:
        name = normalise_host(host)
    except HostError as e:
        return Decision(False, str(e))
    denied = _matches(rules.deny, name)
    if denied is not None:
        return Decision(False, f"{name} is denied by {denied!r}")
    allowed = _matches(rules.allow, name)
    if allowed is None:
        kind = "address" if _address(name) is not None else "name"
        return Decision(False, f"{kind} {name} is not in the network allowlist")
    return Decision(True, f"{name} is allowed by {allowed!r}")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to (mapped, 6to4, Teredo, NAT64)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")


#: Where IPv6 global unicast addresses are allocated from; nothing outside it
#: (deprecated site-local fec0::/10, SRv6's 5f00::/16, ranges yet to come) is
#: a public host, whatever this Python's ``is_global`` says.
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
#: Inside it, ranges that are no public host: documentation (3fff::/20,
#: 2001:db8::/32).
_SPECIAL_V6 = (ipaddress.IPv6Network("3fff::/20"), ipaddress.IPv6Network("2001:db8::/32"))


def _special_v6(address: ipaddress.IPv6Address) -> bool:
    return address not in _GLOBAL_UNICAST_V6 or any(address in net for net in _SPECIAL_V6)


def address_kind(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            kind = address_kind(inner)
            return None if kind is None else f"{kind} ({inner} inside)"
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("shared (CGNAT)", isinstance(address, ipaddress.IPv4Address) and address in _CGNAT),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("special-purpose", isinstance(address, ipaddress.IPv6Address) and _special_v6(address)),
        ("not global", not address.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def decide_addresses(rules: NetworkRules, host: str, addresses: Iterable[str]) -> Decision:
    """May ``host``, already allowed by name, be reached at every one of
    ``addresses``?  One non-public address refuses them all: a resolver that
    mixes a public and a loopback record is an attack, not a fallback."""
    try:
        name = normalise_host(host)
    except HostError as e:
        return Decision(False, str(e))
    # An address listed in allow was asked for by address: no resolver stands between.
    private_ok = _matches(rules.allow_private_for, name) is not None or (
        _address(name) is not None and name in rules.allow)
    seen = []
    for text in addresses:
        address = _address(text)
        if address is None:
            return Decision(False, f"{name} resolved to {text!r}, which is no IP address")
        # An IPv6 address that carries an IPv4 one reaches that one: judged as both.
        inner = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
        forms = (address,) if inner is None else (address, inner)
        denied = next((d for d in (_matches(rules.deny, str(f)) for f in forms) if d is not None), None)
        if denied is not None:
            return Decision(False, f"{name} resolved to {address}, which is denied by {denied!r}")
        kind = address_kind(address)
        always_refused = any(f.is_unspecified or f.is_multicast for f in forms)
        if kind is not None and (always_refused or not private_ok):
            fix = "" if always_refused else "; list it in network.allow_private_for if that is intended"
            return Decision(False, f"{name} resolved to {kind} address {address}{fix}")
        seen.append(str(address))
    if not seen:
        return Decision(False, f"{name} resolved to no address")
    return Decision(True, f"{name} resolved to {', '.join(seen)}")


def split_host_port(authority: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` of a request target, as (host, port).

    Raises ``HostError`` for a missing or out-of-range port, an unclosed
    bracket, userinfo, or characters no authority holds."""
    bad = sorted({c for c in authority if c in _FORBIDDEN - {"[", "]"} or not c.isprintable()})
    if bad or not authority:
        raise HostError(f"target {authority!r} holds {', '.join(repr(c) for c in bad) or 'nothing'}")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise HostError(f"target {authority!r} opens '[' without closing it")
        host, rest = authority[1:end], authority[end + 1 :]
        if _address(host) is None or ":" not in host:
            raise HostError(f"target {authority!r}: brackets hold only an IPv6 address")
        if rest and not rest.startswith(":"):
            raise HostError(f"target {authority!r} has text after ']'")
        port_text = rest[1:] if rest else None
    else:
        if "[" in authority or "]" in authority:
            raise HostError(f"target {authority!r} holds a stray bracket")
        host, colon, port_text_or = authority.rpartition(":")
        if not colon:
            host, port_text = authority, None
        elif ":" in host:
            raise HostError(f"target {authority!r}: an IPv6 address needs brackets, as in '[::1]:443'")
        else:
            port_text = port_text_or
    if not host:
        raise HostError(f"target {authority!r} names no host")
    if port_text is None:
        if default_port is None:
            raise HostError(f"target {authority!r} has no port")
        return host, default_port
    if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5 or not 0 < int(port_text) < 65536:
        raise HostError(f"target {authority!r}: port must be a number from 1 to 65535")
    return host, int(port_text)
