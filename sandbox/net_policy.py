"""The network a session's policy gets: the profile's, narrowed by the caller.

Three settings meet here: the profile's (``network = true|false`` or a
``[network]`` table with an allowlist), the whole network on or off
(``--network/--no-network``, or ``network`` in the environment or a config
file), and hosts named for this session (``--allow-domain`` /
``--deny-domain``).

- Hosts named for the session only narrow: they turn a network that is fully
  on or off into an allowlist, or add to the profile's lists.  Beside them,
  ``--network`` or ``--no-network`` on the same command line is a conflict;
  the same setting from the environment or a config file gives way to them.
- The whole network chosen on the command line (or by an API caller) replaces
  the profile's; chosen for every run (environment, config file), it may turn
  a profile's allowlist off but never widen it to the whole network.

A combination that would be silently ignored or widen is refused instead (a
``ConfigError`` naming where each setting came from, and the fix).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.sandbox.errors import ConfigError

if TYPE_CHECKING:
    from dsh.sandbox.net_rules import NetworkRules
    from dsh.sandbox.profiles import Profile


def _for_this_run(source: str | None) -> bool:
    """Was the whole-network setting chosen for this run (a flag, an API caller)?
    A setting for every run always names its source; never parsed from it (a
    config file's path can say anything)."""
    return source is None


def session_network(profile: Profile, *, network: bool | None, source: str | None = None,
                    allow: Sequence[str] = (), deny: Sequence[str] = ()) -> tuple[bool, NetworkRules | None]:
    """``(network, network_allowlist)`` for the session's constrained modes.

    ``source``: where ``network`` was set for every run ("env VAR", "FILE:LINE"),
    None when it was chosen for this one (a flag, an API caller)."""
    if network is not None and (allow or deny):
        if _for_this_run(source):
            flag = "--network" if network else "--no-network"
            named = "--allow-domain" if allow else "--deny-domain"
            raise ConfigError(f"{flag} and {named} conflict: the first turns the whole network "
                              f"{'on' if network else 'off'}, the second limits it to named hosts; drop one")
        network = None  # a setting for every run gives way to the hosts named for this one
    if network is not None:
        rules = profile.network_allowlist
        _keep_secrets_out(profile, flag=("--network" if network else "--no-network") if _for_this_run(source)
                          else str(source))
        if network and rules is not None and not _for_this_run(source):
            raise ConfigError(
                f"{source} turns the whole network on, and the profile {profile.name!r} limits it to named hosts "
                f"({', '.join(rules.allow) or 'none'}); a setting for every run never widens a profile's "
                "allowlist: pass --network to choose the whole network for this run, or remove that setting")
        return network, None
    rules = profile.network_allowlist
    if not allow and not deny:
        return bool(profile.network), rules
    if rules is None and not allow:
        state = "fully on" if profile.network else "off"
        raise ConfigError(f"--deny-domain: the network is {state} under the profile {profile.name!r}, not limited "
                          "to an allowlist, so there is nothing to deny from; add --allow-domain for each host "
                          "the command needs")
    from dsh.sandbox.net_rules import parse

    merged = parse(
        [*(rules.allow if rules else ()), *allow],
        [*(rules.deny if rules else ()), *deny],
        rules.allow_private_for if rules else (),
    )
    return False, dataclasses.replace(merged, secrets=rules.secrets) if rules else merged


def _keep_secrets_out(profile: Profile, *, flag: str) -> None:
    """Refuse to drop an allowlist with secrets while the profile passes a
    secret's variable through: the command would get the real value."""
    rules = profile.network_allowlist
    if rules is None or not rules.secrets:
        return
    import fnmatch

    passed = [rule.env for rule in rules.secrets
              if any(fnmatch.fnmatchcase(rule.env, pattern) for pattern in profile.env_passthrough)]
    if passed:
        raise ConfigError(
            f"{flag} replaces the allowlist of the profile {profile.name!r}, whose secret {passed[0]} the proxy "
            f"keeps out of the sandbox, and the profile passes {passed[0]} through (env_passthrough): the command "
            f"would get the real value; drop {flag}, or use a profile that does not pass {passed[0]} through")
