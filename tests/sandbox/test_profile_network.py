"""The ``[network]`` table of a profile, and how a session's flags narrow it.

``network = true|false`` keeps working; a table limits the network to named
hosts.  Extending profiles add hosts; a child that turns the network off or on
drops the inherited hosts; every contradiction is refused with its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.net_policy import session_network
from dsh.sandbox.net_rules import NetworkRules
from dsh.sandbox.profiles import ProfileError, load_profile


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


ALLOWLIST = '[network]\nmode = "allowlist"\nallow = ["PyPI.org", "*.Example.com", "files.pythonhosted.org."]\n' \
            'deny = ["up.example.com"]\n'


def test_a_table_limits_the_network_to_normalised_hosts(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p", 'extends = "python"\n' + ALLOWLIST))
    assert profile.network is False
    assert profile.network_allowlist == NetworkRules(
        allow=("pypi.org", "*.example.com", "files.pythonhosted.org"), deny=("up.example.com",))
    assert profile.to_dict()["network_allowlist"] == {
        "allow": ["pypi.org", "*.example.com", "files.pythonhosted.org"], "deny": ["up.example.com"],
        "allow_private_for": [], "secrets": []}


@pytest.mark.parametrize(("text", "network"), [
    ("network = true\n", True), ("network = false\n", False),
    ('[network]\nmode = "on"\n', True), ('[network]\nmode = "off"\n', False),
])
def test_the_boolean_and_the_table_say_the_same(tmp_path: Path, text: str, network: bool) -> None:
    profile = load_profile(write(tmp_path, "p", text))
    assert (profile.network, profile.network_allowlist) == (network, None)


def test_a_child_adds_hosts_and_keeps_the_parents_mode(tmp_path: Path) -> None:
    write(tmp_path, "base", ALLOWLIST)
    child = load_profile(write(tmp_path, "child", 'extends = "base.toml"\n[network]\nallow = ["npmjs.org"]\n'
                                                  'deny = ["evil.example.com"]\n'))
    assert child.network_allowlist is not None
    assert child.network_allowlist.allow[-1] == "npmjs.org" and "pypi.org" in child.network_allowlist.allow
    assert child.network_allowlist.deny == ("up.example.com", "evil.example.com")


@pytest.mark.parametrize(("text", "network"), [("network = false\n", False), ("network = true\n", True)])
def test_a_child_that_turns_the_network_off_or_on_drops_the_inherited_hosts(
        tmp_path: Path, text: str, network: bool) -> None:
    write(tmp_path, "base", ALLOWLIST)
    child = load_profile(write(tmp_path, "child", 'extends = "base.toml"\n' + text))
    assert (child.network, child.network_allowlist) == (network, None)


@pytest.mark.parametrize(("parent", "mode"), [("node", "'on'"), ("python", "'off'")])
def test_hosts_listed_under_an_inherited_mode_that_ignores_them_are_refused(tmp_path: Path, parent: str,
                                                                            mode: str) -> None:
    # Extending a profile with the network on, a list of hosts must not read as
    # an allowlist while the run gets the whole network.
    path = write(tmp_path, "p", f'extends = "{parent}"\n[network]\nallow = ["registry.npmjs.org"]\n')
    with pytest.raises(ProfileError, match=f"the mode it inherits is {mode}; add mode = \"allowlist\""):
        load_profile(path)


def test_every_problem_of_the_table_is_listed_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad", '[network]\nmode = "allowlist"\nallow = ["ok.org", "https://x.org/"]\n'
                                  'deny = ["*"]\nallow_privat = []\n')
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    text = str(caught.value)
    assert "key 'network.allow' at line 3: 'https://x.org/' is a URL" in text
    assert "key 'network.deny' at line 4: '*' would deny every host" in text
    assert "unknown key 'allow_privat' at line 5; did you mean 'allow_private_for'?" in text


@pytest.mark.parametrize("text", [
    '[network]\nmode = "on"\nallow = ["x.org"]\n',
    '[network]\nmode = "off"\ndeny = ["x.org"]\n',
])
def test_host_lists_beside_a_mode_that_ignores_them_are_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(ProfileError, match=r"applies only with mode = \"allowlist\""):
        load_profile(write(tmp_path, "p", text))


def test_hosts_without_a_mode_anywhere_in_the_chain_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match='add mode = "allowlist"'):
        load_profile(write(tmp_path, "p", '[network]\nallow = ["x.org"]\n'))


@pytest.mark.parametrize(("text", "problem"), [
    ('network = "yes"\n', "must be true or false"),
    ('[network]\nmode = "some"\n', "must be one of 'off', 'allowlist', 'on'"),
    ('[network]\nmode = "allowlist"\nallow = "x.org"\n', "must be a list of strings"),
])
def test_wrong_types_are_refused_with_the_fix(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ProfileError, match=problem):
        load_profile(write(tmp_path, "p", text))


# -- the session's flags ---------------------------------------------------------------
def test_allowed_hosts_narrow_a_network_that_is_off_or_on(tmp_path: Path) -> None:
    for name in ("python", "node"):  # off, on
        network, rules = session_network(load_profile(name), network=None, allow=["x.org"])
        assert network is False and rules == NetworkRules(allow=("x.org",))


def test_flags_add_to_the_profiles_lists(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p", ALLOWLIST))
    network, rules = session_network(profile, network=None, allow=["npmjs.org"], deny=["files.pythonhosted.org"])
    assert network is False and rules is not None
    assert rules.allow[-1] == "npmjs.org" and rules.deny == ("up.example.com", "files.pythonhosted.org")


def test_the_whole_network_flag_overrides_the_profiles_allowlist(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p", ALLOWLIST))
    assert session_network(profile, network=False) == (False, None)
    assert session_network(profile, network=True) == (True, None)
    assert session_network(profile, network=None) == (False, profile.network_allowlist)


def test_a_setting_for_every_run_never_widens_the_profiles_allowlist(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p", ALLOWLIST))
    for source in ("env DSH_SANDBOX_NETWORK", "/home/u/.config/dsh-sandbox/config.toml:3"):
        with pytest.raises(ConfigError, match=f"{source} turns the whole network on.*pass --network"):
            session_network(profile, network=True, source=source)
        # Off is narrower: it applies.
        assert session_network(profile, network=False, source=source) == (False, None)
    # Chosen for this run (on the command line, by an API caller): it applies.
    assert session_network(profile, network=True, source=None) == (True, None)
    # A source is never parsed: a config file whose path starts like a flag is still a file.
    with pytest.raises(ConfigError, match="never widens"):
        session_network(profile, network=True, source="flag x/.config/dsh-sandbox/config.toml:1")


def test_hosts_named_for_the_run_win_over_a_setting_for_every_run() -> None:
    # A project file or the environment turning the network off does not block --allow-domain.
    network, rules = session_network(load_profile("python"), network=False, source="/p/.dsh/config.toml:1",
                                     allow=["x.org"])
    assert network is False and rules == NetworkRules(allow=("x.org",))


@pytest.mark.parametrize(("network", "allow", "deny", "problem"), [
    (True, ["x.org"], [], "--network and --allow-domain conflict"),
    (False, [], ["x.org"], "--no-network and --deny-domain conflict"),
    (None, [], ["x.org"], "nothing to deny from"),
    (None, ["https://x.org"], [], "is a URL"),
])
def test_contradictory_flags_are_refused(network: bool | None, allow: list[str], deny: list[str],
                                         problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        session_network(load_profile("python"), network=network, allow=allow, deny=deny)
