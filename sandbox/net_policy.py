"""The network a session's policy gets: the profile's, narrowed by the caller.

Three settings meet here: the profile's (``network = true|false`` or a
``[network]`` table with an allowlist), an override of the whole network
(``--network/--no-network``), and hosts named for this session
(``--allow-domain`` / ``--deny-domain``).  Hosts named for the session only
ever narrow: they turn a network that is fully on or off into an allowlist,
or add to the profile's lists.  A combination that would be silently ignored
is refused instead (a ``ConfigError`` naming the flags and the fix).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.sandbox.errors import ConfigError

if TYPE_CHECKING:
    from dsh.sandbox.net_rules import NetworkRules
    from dsh.sandbox.profiles import Profile


def session_network(profile: Profile, *, network: bool | None, allow: Sequence[str] = (),
                    deny: Sequence[str] = ()) -> tuple[bool, NetworkRules | None]:
    """``(network, network_allowlist)`` for the session's constrained modes."""
    if network is not None:
        if allow or deny:
            flag = "--network" if network else "--no-network"
            named = "--allow-domain" if allow else "--deny-domain"
            raise ConfigError(f"{flag} and {named} conflict: the first turns the whole network "
                              f"{'on' if network else 'off'}, the second limits it to named hosts; drop one")
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
    return False, merged
