"""Secrets that never enter the sandbox: placeholders, and the proxy's per-session CA.

A profile names a secret by the host variable that holds it, the hosts it is
for and the header it goes in.  The command sees a random placeholder in that
variable; the proxy, which terminates TLS for those hosts with a certificate
from a CA made for the session (trusted inside the sandbox only), puts the
real value in place of the placeholder in that header of requests to those
hosts, and refuses a request that carries a placeholder anywhere else.

This module holds the pieces that need no network: the rules, the values and
their placeholders, what a request head becomes (``Secrets.rewrite``), and the
CA (``SessionCA``, which needs the ``cryptography`` package).
"""

from __future__ import annotations

import datetime
import os
import secrets as random
import ssl
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.net_rules import HostError, NetworkRules, SecretRule, normalise_host, normalised_entry

__all__ = [
    "CA_BUNDLE_PATH",
    "CA_VARIABLES",
    "SECRET_KEYS",
    "SecretRule",
    "Secrets",
    "SessionCA",
    "ca_environment",
    "parse_secret",
    "secret_table_problems",
    "values_in",
]

_ENV_NAME = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = LazyPattern(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: Long enough that a guess is hopeless, plain enough for any header or URL.
_PLACEHOLDER_BYTES = 24


#: Where TLS clients look for the CAs they trust: each names the session's
#: bundle (the system's CAs and the session CA) inside the sandbox.
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PIP_CERT",
                "GIT_SSL_CAINFO", "NPM_CONFIG_CAFILE", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO")


#: Where a runner puts the bundle inside the sandbox (on the sandbox's own /dev).
CA_BUNDLE_PATH = "/dev/dsh-sandbox/ca-bundle.pem"


def values_in(rules: Iterable[SecretRule], env: Mapping[str, str], source: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, secret) when a variable of ``env`` other than the secret's own
    (which gets its placeholder) holds a secret's value from ``source``."""
    rules = tuple(rules)
    for name, text in env.items():
        for rule in rules:
            value = source.get(rule.env)
            if name != rule.env and value and value in text:
                return name, rule.env
    return None


def ca_environment(bundle_path: str = CA_BUNDLE_PATH) -> dict[str, str]:
    """The variables that make the command's TLS clients trust the bundle at ``bundle_path``."""
    return dict.fromkeys(CA_VARIABLES, bundle_path)


#: The keys of one ``[[network.secrets]]`` table.
SECRET_KEYS = ("env", "hosts", "header")
_SECRET_EXAMPLE = 'write [[network.secrets]] with env = "GITHUB_TOKEN" and hosts = ["api.github.com"]'


def secret_table_problems(value: object) -> list[tuple[str, str]]:
    """What is wrong with the shape of ``network.secrets`` (a list of tables
    with ``env``, ``hosts`` and an optional ``header``): (problem, fix) pairs.
    The values are checked by ``parse_secret`` once the allowlist is known."""
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        return [(f"must be a list of tables, got {value!r}", _SECRET_EXAMPLE)]
    problems: list[tuple[str, str]] = []
    envs: set[object] = set()
    for table in value:
        unknown = sorted(set(table) - set(SECRET_KEYS))
        if unknown:
            problems.append((f"a secret has the unknown key {unknown[0]!r}", f"use only {', '.join(SECRET_KEYS)}"))
        missing = [key for key in SECRET_KEYS[:2] if key not in table]
        if missing:
            problems.append((f"a secret without {missing[0]}", _SECRET_EXAMPLE))
        env = table.get("env")
        if env in envs:
            problems.append((f"{env} is listed twice", "list each variable once, with all its hosts"))
        envs.add(env)
    return problems


#: Variables the command needs for itself, or that the sandbox sets (its proxy
#: and CA variables): a placeholder in one would break the command or the
#: sandbox's own routing, never carry a token.
_RESERVED_ENV = frozenset({
    "PATH", "HOME", "SHELL", "USER", "LOGNAME", "PWD", "TMPDIR", "TERM", "LANG", "SSL_CERT_DIR",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", *CA_VARIABLES,
})
_RESERVED_ENV_PREFIXES = ("LD_", "LC_")
#: Headers that route or frame a request, or speak to the proxy: never a credential's place.
_RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-connection", "proxy-authenticate", "forwarded", "x-forwarded-host",
    "x-forwarded-server", "x-host", "x-original-host", "x-http-host-override", "x-original-url", "x-rewrite-url",
    "expect",
})


def parse_secret(rules: NetworkRules, env: object, hosts: object, header: object = "Authorization") -> SecretRule:
    """A validated ``SecretRule`` for ``rules``; ``ConfigError`` names the field and the fix."""
    if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        raise ConfigError(f"network.secrets env: {env!r} is not a variable name; write env = \"GITHUB_TOKEN\"")
    if env.upper() in _RESERVED_ENV or env.upper().startswith(_RESERVED_ENV_PREFIXES):
        raise ConfigError(f"network.secrets env: {env} is a variable the command or the sandbox needs for itself, "
                          "and would hold a placeholder; keep the token in a variable of its own, e.g. "
                          "env = \"GITHUB_TOKEN\"")
    if not isinstance(header, str) or not _HEADER_NAME.fullmatch(header):
        raise ConfigError(f"network.secrets header: {header!r} is not a header name; write header = "
                          "\"Authorization\"")
    if header.lower() in _RESERVED_HEADERS:
        raise ConfigError(f"network.secrets header: {header} routes or frames the request, not a credential; "
                          "write header = \"Authorization\" (or the header the API reads its token from, "
                          "e.g. \"X-API-Key\")")
    if not isinstance(hosts, list | tuple) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"network.secrets hosts of {env}: {hosts!r}; write hosts = [\"api.example.com\"]")
    entries = tuple(dict.fromkeys(normalised_entry("network.secrets hosts", h) for h in hosts))
    for entry in entries:
        if not _covered(rules.allow, entry):
            raise ConfigError(f"network.secrets hosts of {env}: {entry!r} is not in network.allow; a secret "
                              "goes only to a host the command may reach: add it there too")
    return SecretRule(env, entries, header)


def _covered(allow: Iterable[str], entry: str) -> bool:
    for allowed in allow:
        if allowed == entry:
            return True
        if allowed.startswith("*.") and entry.removeprefix("*.").endswith(allowed[1:]):
            return True
    return False


def _for_host(rule: SecretRule, host: str) -> bool:
    return any(entry == host or (entry.startswith("*.") and host.endswith(entry[1:])) for entry in rule.hosts)


class Secrets:
    """The session's values and placeholders.  The values never leave the host
    process: only ``environment()`` (the placeholders) goes to the command."""

    def __init__(self, rules: Iterable[SecretRule], source: Mapping[str, str]) -> None:
        """``source``: the host's environment the values are taken from."""
        self._rules = tuple(rules)
        self._values: dict[str, tuple[bytes, bytes]] = {}  # env -> (placeholder, value)
        for rule in self._rules:
            value = source.get(rule.env)
            if not value:
                raise ConfigError(f"network.secrets: {rule.env} is not set in dsh-sandbox's environment; set it "
                                  "there (it never reaches the command), or remove the entry")
            if any(c in value for c in "\r\n\0"):
                raise ConfigError(f"network.secrets: {rule.env} holds a line break or NUL, which no header may "
                                  "carry")
            placeholder = f"dsh-secret-{random.token_hex(_PLACEHOLDER_BYTES)}"
            self._values[rule.env] = (placeholder.encode(), value.encode())

    def environment(self) -> dict[str, str]:
        """What the command gets: each variable holding its placeholder."""
        return {env: placeholder.decode() for env, (placeholder, _) in self._values.items()}

    def hosts(self) -> tuple[str, ...]:
        """The entries whose TLS the proxy terminates."""
        return tuple(dict.fromkeys(h for rule in self._rules for h in rule.hosts))

    def intercepts(self, host: str) -> bool:
        try:
            name = normalise_host(host)
        except HostError:
            return False
        return any(_for_host(rule, name) for rule in self._rules)

    def rewrite(self, head: bytes, host: str) -> tuple[bytes, str | None]:
        """``head`` (a request line and headers, CRLF-separated, ending in an
        empty line) as sent on to ``host``: each placeholder replaced by its
        value in the header its rule names, if the rule is for ``host``.
        Returns (the head, None), or (b"", why) when a placeholder is anywhere
        else: that request is refused."""
        name = normalise_host(host)
        lines = head.split(b"\r\n")
        out = [lines[0]]
        for line in lines[1:]:
            field, sep, value = line.partition(b":")
            for rule in self._rules:
                placeholder, real = self._values[rule.env]
                if placeholder in value and sep and _for_host(rule, name) and \
                        field.strip().lower() == rule.header.lower().encode():
                    value = value.replace(placeholder, real)
            out.append(field + sep + value)
        rewritten = b"\r\n".join(out)
        for env, (placeholder, _) in self._values.items():
            if placeholder in rewritten:
                return b"", f"the placeholder of {env} outside the header it may fill for this host"
        return rewritten, None

    def found_in(self, env: Mapping[str, str]) -> tuple[str, str] | None:
        """(variable, secret) when a variable of ``env`` (the command's, about to
        be handed to it) holds a secret's real value under any name."""
        for name, text in env.items():
            data = text.encode(errors="surrogateescape")
            for secret, (_, value) in self._values.items():
                if value in data:
                    return name, secret
        return None

    def carried(self, data: bytes) -> str | None:
        """The variable whose placeholder ``data`` holds, if any (a request the
        proxy sees but does not rewrite: plain HTTP, a host not listed)."""
        return next((env for env, (placeholder, _) in self._values.items() if placeholder in data), None)


class SessionCA:
    """A CA made for one session: the sandbox trusts it, the host never does.

    Its key stays in this process's memory; only the certificate is written
    (``bundle``), with the system's CAs, for the command's TLS clients."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"dsh-sandbox session {random.token_hex(4)}")])
        now = datetime.datetime.now(datetime.UTC)
        self._name = name
        self._cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=2))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self._lock = threading.Lock()
        self._contexts: dict[str, ssl.SSLContext] = {}

    def certificate_pem(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding

        return self._cert.public_bytes(Encoding.PEM)

    def bundle(self, system_cafile: str | None = None) -> bytes:
        """The system's CAs and this one: what ``SSL_CERT_FILE`` names inside."""
        cafile = system_cafile or ssl.get_default_verify_paths().cafile
        system = Path(cafile).read_bytes() if cafile and Path(cafile).is_file() else b""
        return system.rstrip(b"\n") + b"\n" + self.certificate_pem()

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for ``host`` (a
        normalised name), signed by this CA; made once per host."""
        with self._lock:
            context = self._contexts.get(host)
            if context is None:
                context = self._contexts[host] = self._make_context(host)
            return context

    def _make_context(self, host: str) -> ssl.SSLContext:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
                .issuer_name(self._name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(self._key, hashes.SHA256()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        # ssl loads a chain only from a path: a memory file of this process's
        # own, never a file on disk another process of the user could read.
        fd = os.memfd_create("dsh-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())
                     + cert.public_bytes(serialization.Encoding.PEM))
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return context
