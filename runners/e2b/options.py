"""The E2B runner's configuration, validated once (bad values are ``ConfigError``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.numeric import seconds

_USER_NAME = LazyPattern(r"^[a-z_][a-z0-9_-]{0,27}$")
# The template's default user has passwordless sudo and root is root: neither
# can be the unprivileged user the restricted modes run as.
_RESERVED_USERS = frozenset({"root", "user"})
_KNOWN = ("template", "timeout", "api_key", "debug", "sandbox_url", "user",
          "request_timeout", "setup_timeout", "sync_timeout", "domain")


@dataclass(frozen=True)
class E2BOptions:
    """- ``template``: sandbox template (None = the SDK's default ``base``).
    - ``timeout``: sandbox lifetime in seconds (E2B kills it afterwards).
    - ``api_key``: E2B key; falls back to ``E2B_API_KEY``.
    - ``debug`` / ``sandbox_url``: talk straight to the envd at ``sandbox_url``
      (the SDK's debug mode: no E2B API calls).  ``sandbox_url`` implies debug.
    - ``user``: name of the unprivileged user created in the sandbox for
      workspace-write; read-only runs as ``<user>-ro``.
    - ``request_timeout`` / ``setup_timeout`` / ``sync_timeout``: seconds for one
      API request, the sandbox setup (create + users + sync-in) and one sync-back.
    """

    template: str | None = None
    timeout: int = 3600
    api_key: str | None = None
    debug: bool = False
    sandbox_url: str | None = None
    user: str = "dsh"
    request_timeout: float = 60.0
    setup_timeout: float = 300.0
    sync_timeout: float = 300.0
    domain: str | None = None

    @property
    def readonly_user(self) -> str:
        return f"{self.user}-ro"

    def resolved_api_key(self) -> str | None:
        return self.api_key or os.environ.get("E2B_API_KEY") or None

    def sdk_params(self) -> dict[str, Any]:
        """Connection keyword arguments for ``Sandbox.create``."""
        params: dict[str, Any] = {"request_timeout": self.request_timeout}
        if self.debug:
            params.update(debug=True, sandbox_url=self.sandbox_url)
        else:
            params["api_key"] = self.resolved_api_key()
            if self.sandbox_url:
                params["sandbox_url"] = self.sandbox_url
        if self.domain:
            params["domain"] = self.domain
        return params

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> E2BOptions:
        unknown = sorted(set(options) - set(_KNOWN))
        if unknown:
            raise ConfigError(
                f"e2b runner: unknown option(s) {', '.join(unknown)}; known: {', '.join(_KNOWN)}")
        values: dict[str, Any] = {}
        for name in ("template", "api_key", "sandbox_url", "domain"):
            if options.get(name) is not None:
                values[name] = _text(name, options[name])
        for name in ("timeout", "request_timeout", "setup_timeout", "sync_timeout"):
            if options.get(name) is not None:
                values[name] = _positive(name, options[name])
        values["timeout"] = int(values.get("timeout", cls.timeout))
        sandbox_url = values.get("sandbox_url")
        debug = options.get("debug", sandbox_url is not None)
        if not isinstance(debug, bool):
            raise ConfigError(f"e2b runner: debug must be true or false, not {debug!r}")
        if debug and not sandbox_url:
            raise ConfigError(
                "e2b runner: debug: true needs sandbox_url (the envd to talk to, "
                "e.g. http://127.0.0.1:49983)")
        if sandbox_url and not sandbox_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"e2b runner: sandbox_url must be an http(s) URL, not {sandbox_url!r}")
        values["debug"] = debug
        user = options.get("user", cls.user)
        if not isinstance(user, str) or not _USER_NAME.match(user) or user in _RESERVED_USERS:
            raise ConfigError(
                f"e2b runner: user {user!r} is not usable: give a new lowercase user name "
                "(letters, digits, '-', '_'; not 'root' or 'user', which have root or sudo)")
        values["user"] = user
        return cls(**values)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"e2b runner: {name} must be a non-empty string, not {value!r}")
    return value


def _positive(name: str, value: Any) -> float:
    return seconds(f"e2b runner: {name}", value)
