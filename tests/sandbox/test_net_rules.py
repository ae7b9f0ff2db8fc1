"""The network allowlist (``sandbox/net_rules.py``): entries are validated with
a message naming the entry and the fix, every spelling of a name meets the
same rule, ``deny`` beats ``allow``, and resolved addresses must be public
unless the entry is listed in ``allow_private_for``."""

from __future__ import annotations

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.net_rules import (
    HostError,
    NetworkRules,
    decide_addresses,
    decide_name,
    normalise_host,
    normalised_entry,
    parse,
    split_host_port,
)
from hypothesis import given, settings
from hypothesis import strategies as st

RULES = parse(
    allow=["pypi.example.org", "*.example.com", "203.0.113.7", "2001:db8::7", "bücher.example", "lan.example"],
    deny=["evil.example.com", "*.bad.example.com"],
    allow_private_for=["lan.example"],
)


def test_entries_are_normalised() -> None:
    rules = parse(["PyPI.Example.ORG.", "*.Example.com", "2001:DB8:0::7", "BÜCHER.example"], ["x.example"])
    assert rules == NetworkRules(
        allow=("pypi.example.org", "*.example.com", "2001:db8::7", "xn--bcher-kva.example"),
        deny=("x.example",),
    )


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("", "not a host name"),
        ("   ", "not a host name"),
        (" pypi.org", "whitespace"),
        ("pypi .org", "whitespace"),
        ("pypi.org:443", "port"),
        ("[::1]", "brackets"),
        ("https://pypi.org", "URL"),
        ("pypi.org/simple", "path"),
        ("*", "every host"),
        ("*.", "every host"),
        ("a.*.example.com", "whole first label"),
        ("*example.com", "whole first label"),
        ("*.com", "top-level"),
        ("*.203.0.113.7", "cannot cover addresses"),
        ("a..example", "IDNA"),
        ("user@pypi.org", "'@'"),
        ("a%2e.org", "'%'"),
        ("nul\x00.org", "'\\x00'"),
        ("2130706433", "numeric"),
        ("0x7f.1", "numeric"),
        ("-x-.org", "not a valid name"),
        ("a" * 64 + ".org", "IDNA"),
    ],
)
def test_bad_entries_are_refused_naming_the_entry(entry: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(["ok.example"], deny=[entry])
    message = str(caught.value)
    assert message.startswith(f"network.deny: {entry!r}")
    assert words in message
    assert "write" in message or "list" in message or "name the domain" in message  # the fix


def test_private_permission_needs_the_entry_allowed() -> None:
    with pytest.raises(ConfigError, match=r"'lan\.example' is not in network\.allow; add it there too"):
        parse(["pypi.org"], allow_private_for=["lan.example"])


@pytest.mark.parametrize(
    "host",
    [
        "pypi.example.org",
        "PYPI.example.org.",
        "a.example.com",
        "a.b.example.com",
        "203.0.113.7",
        "2001:DB8::7",
        "bücher.example",
        "xn--bcher-kva.example",
        "BÜCHER.EXAMPLE.",
        "ｐｙｐｉ.example.org",
    ],
)
def test_allowed_hosts_in_every_spelling(host: str) -> None:
    assert decide_name(RULES, host).allowed


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("example.com", "not in the network allowlist"),  # a wildcard never covers its apex
        ("evil.example.com", "denied by 'evil.example.com'"),
        ("EVIL.Example.COM.", "denied by 'evil.example.com'"),
        ("ｅｖｉｌ.example.com", "denied by"),
        ("x.bad.example.com", "denied by '*.bad.example.com'"),
        ("pypi.example.org.evil.test", "not in the network allowlist"),
        ("xpypi.example.org", "not in the network allowlist"),
        ("127.0.0.1", "address 127.0.0.1 is not in"),
        ("::1", "address ::1 is not in"),
        ("::ffff:203.0.113.7", "not in"),  # only the listed spelling of an address
        ("localhost", "not in"),
        ("localhost.", "not in"),
        ("2130706433", "numeric"),
        ("0x7f.1", "numeric"),
        ("127.1", "numeric"),
        ("0177.0.0.1", "numeric"),
        ("a.example.com..", "not a valid name"),
        ("", "empty"),
        ("a b.example.com", "' '"),
        ("a@pypi.example.org", "'@'"),
        ("fe80::1%eth0", "'%'"),
        ("a.example.com/x", "'/'"),
        ("a.example.com:80", "':'"),
    ],
)
def test_refused_hosts(host: str, words: str) -> None:
    decision = decide_name(RULES, host)
    assert not decision.allowed
    assert words in decision.reason


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "CGNAT"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::7f00:1", "loopback"),
        # Outside IPv6 global unicast (2000::/3), whatever this Python's is_global says.
        ("fec0::1", "site-local"),
        ("5f00::1", "reserved"),
        ("3fff::1", "special-purpose"),
        ("2002:7f00:1::1", "loopback"),
        ("192.0.2.1", "private"),
    ],
)
def test_non_public_addresses_are_refused(address: str, kind: str) -> None:
    decision = decide_addresses(RULES, "a.example.com", [address])
    assert not decision.allowed
    assert kind in decision.reason
    assert decide_addresses(RULES, "a.example.com", ["93.184.216.34", "2606:2800:220:1::1"]).allowed


def test_one_private_address_among_public_ones_refuses_all() -> None:
    assert not decide_addresses(RULES, "a.example.com", ["93.184.216.34", "127.0.0.1"]).allowed


def test_private_permission_is_per_entry() -> None:
    assert decide_addresses(RULES, "lan.example", ["10.0.0.5", "127.0.0.1", "fe80::1"]).allowed
    assert "allow_private_for" in decide_addresses(RULES, "pypi.example.org", ["10.0.0.5"]).reason
    # The unspecified address reaches the host under another spelling: never.
    assert not decide_addresses(RULES, "lan.example", ["0.0.0.0"]).allowed
    assert not decide_addresses(RULES, "lan.example", ["224.0.0.1"]).allowed


def test_no_or_garbled_addresses_are_refused() -> None:
    assert not decide_addresses(RULES, "a.example.com", []).allowed
    assert not decide_addresses(RULES, "a.example.com", ["not-an-ip"]).allowed


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("a.example:443", ("a.example", 443)),
        ("[::1]:8080", ("::1", 8080)),
        ("1.2.3.4:1", ("1.2.3.4", 1)),
        ("h:65535", ("h", 65535)),
    ],
)
def test_split_host_port(target: str, expected: tuple[str, int]) -> None:
    assert split_host_port(target) == expected


def test_split_host_port_default() -> None:
    assert split_host_port("a.example", 80) == ("a.example", 80)
    assert split_host_port("[::1]", 80) == ("::1", 80)


@pytest.mark.parametrize(
    "target",
    [
        "a.example",
        "a.example:",
        "a.example:0",
        "a.example:65536",
        "a.example:99999999",
        "a.example:+80",
        "a.example:8o",
        "[::1:443",
        "[::1]x:443",
        "[a.example]:443",
        "::1:443",
        "user@a.example:443",
        "a example:443",
        "a\x00.example:443",
        ":443",
        "a]:443",
        "a.example:٤٤٣",
    ],
)
def test_split_host_port_refuses_malformed_targets(target: str) -> None:
    with pytest.raises(HostError):
        split_host_port(target)


def test_normalise_host_forms() -> None:
    assert normalise_host("Bücher.Example.") == "xn--bcher-kva.example"
    assert normalise_host("2001:0DB8::0001") == "2001:db8::1"
    with pytest.raises(HostError):
        normalise_host("a..")


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_any_host_is_decided_without_raising(host: str) -> None:
    decision = decide_name(RULES, host)
    if decision.allowed:
        # Whatever was allowed normalises to a listed name or one below a wildcard.
        name = normalise_host(host)
        assert name in RULES.allow or name.endswith(".example.com")
    try:
        split_host_port(host)
    except HostError:
        pass


def test_a_denied_address_is_refused_after_resolution_too() -> None:
    rules = parse(["localhost"], deny=["127.0.0.1"], allow_private_for=["localhost"])
    assert decide_name(rules, "localhost").allowed
    refused = decide_addresses(rules, "localhost", ["127.0.0.1"])
    assert not refused.allowed and "denied by '127.0.0.1'" in refused.reason
    assert decide_addresses(rules, "localhost", ["::1"]).allowed


def test_an_address_listed_in_allow_may_be_private_a_name_may_not() -> None:
    rules = parse(["127.0.0.1", "mirror.lan"])
    assert decide_addresses(rules, "127.0.0.1", ["127.0.0.1"]).allowed
    assert not decide_addresses(rules, "mirror.lan", ["127.0.0.1"]).allowed  # a rebinding, by name


@pytest.mark.parametrize("entry", ["0.0.0.0", "::", "224.0.0.1", "ff02::1"])
def test_unspecified_and_multicast_addresses_are_refused_as_entries(entry: str) -> None:
    with pytest.raises(ConfigError, match="unspecified or multicast"):
        parse([entry])


@pytest.mark.parametrize("deny", ["127.0.0.1", "127.0.0.0"])
def test_an_ipv6_address_carrying_a_denied_ipv4_one_is_denied(deny: str) -> None:
    rules = parse(["*.example.com", "localhost"], deny=["93.184.216.34", deny],
                  allow_private_for=["localhost"])
    for carried in ("::ffff:93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1"):
        assert not decide_addresses(rules, "x.example.com", [carried]).allowed, carried
    if deny == "127.0.0.1":
        assert not decide_addresses(rules, "localhost", ["::ffff:127.0.0.1"]).allowed


def test_unspecified_and_multicast_inside_ipv6_are_always_refused() -> None:
    rules = parse(["mirror.lan"], allow_private_for=["mirror.lan"])
    for carried in ("::ffff:0.0.0.0", "::ffff:224.0.0.1"):
        assert not decide_addresses(rules, "mirror.lan", [carried]).allowed, carried


@pytest.mark.parametrize("entry", ["::ffff:127.0.0.1", "::ffff:0.0.0.0", "64:ff9b::7f00:1", "2002:7f00:1::"])
def test_ipv6_entries_that_carry_an_ipv4_address_are_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="carries the IPv4 address"):
        parse([entry])
    with pytest.raises(ConfigError, match="carries the IPv4 address"):
        parse(["x.org"], deny=[entry])


def test_a_deny_wildcard_for_everything_says_deny() -> None:
    with pytest.raises(ConfigError, match="would deny every host"):
        normalised_entry("--deny-domain", "*")
