"""``[[network.secrets]]`` in a profile: parsed into the allowlist, refused with
the field and the fix when wrong, kept through the session's flags, and refused
by every runner that cannot keep the value out of the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.runners.fake.runner import FakeRunner
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_policy import session_network
from dsh.sandbox.net_secrets import SecretRule
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.profiles import ProfileError, load_profile
from dsh.sandbox.runner import NO_SECRETS, network_refusal

SECRET = ('[network]\nmode = "allowlist"\nallow = ["api.github.com", "*.example.com"]\n'
          '[[network.secrets]]\nenv = "GITHUB_TOKEN"\nhosts = ["API.github.com"]\n')


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_secret_is_parsed_into_the_allowlist(tmp_path: Path) -> None:
    rules = load_profile(write(tmp_path, "p", SECRET + '[[network.secrets]]\nenv = "NPM"\n'
                                              'hosts = ["*.example.com"]\nheader = "X-Token"\n')).network_allowlist
    assert rules is not None
    assert rules.secrets == (SecretRule("GITHUB_TOKEN", ("api.github.com",)),
                             SecretRule("NPM", ("*.example.com",), "X-Token"))


@pytest.mark.parametrize(("extra", "problem"), [
    ('[[network.secrets]]\nenv = "A B"\nhosts = ["api.github.com"]\n', "is not a variable name"),
    ('[[network.secrets]]\nenv = "X"\nhosts = ["other.org"]\n', "is not in network.allow"),
    ('[[network.secrets]]\nenv = "X"\nhosts = ["api.github.com"]\nheader = "Bad Header"\n', "not a header name"),
    ('[[network.secrets]]\nenv = "X"\n', "a secret without hosts"),
    ('[[network.secrets]]\nenv = "X"\nhosts = ["api.github.com"]\nvalue = "s3cr3t"\n', "unknown key 'value'"),
    ('[[network.secrets]]\nenv = "GITHUB_TOKEN"\nhosts = ["api.github.com"]\n', "GITHUB_TOKEN is listed twice"),
])
def test_a_bad_secret_names_the_field_and_the_fix(tmp_path: Path, extra: str, problem: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(write(tmp_path, "p", SECRET + extra))
    assert problem in str(caught.value)
    assert "network.secrets" in str(caught.value)


@pytest.mark.parametrize("mode", ["on", "off"])
def test_secrets_need_the_allowlist_mode(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ProfileError, match="secrets"):
        load_profile(write(tmp_path, "p", SECRET.replace('"allowlist"', f'"{mode}"')))


def test_a_child_adds_secrets_and_replaces_one_for_the_same_variable(tmp_path: Path) -> None:
    write(tmp_path, "base", SECRET)
    child = load_profile(write(tmp_path, "child", 'extends = "base.toml"\n[network]\n'
                                                  '[[network.secrets]]\nenv = "GITHUB_TOKEN"\n'
                                                  'hosts = ["api.github.com"]\nheader = "X-Token"\n'
                                                  '[[network.secrets]]\nenv = "NPM"\nhosts = ["a.example.com"]\n'))
    assert child.network_allowlist is not None
    assert child.network_allowlist.secrets == (SecretRule("GITHUB_TOKEN", ("api.github.com",), "X-Token"),
                                               SecretRule("NPM", ("a.example.com",)))


def test_hosts_named_for_the_run_keep_the_secrets(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p", SECRET))
    _, rules = session_network(profile, network=None, allow=["pypi.org"], deny=["x.example.com"])
    assert rules is not None and rules.secrets == (SecretRule("GITHUB_TOKEN", ("api.github.com",)),)


@pytest.mark.parametrize("network", [True, False])
def test_dropping_the_allowlist_of_a_secret_passed_through_is_refused(tmp_path: Path, network: bool) -> None:
    passed = load_profile(write(tmp_path, "p", 'env_passthrough = ["GITHUB_*"]\n' + SECRET))
    flag = "--network" if network else "--no-network"
    with pytest.raises(ConfigError, match=f"{flag} replaces the allowlist .* passes GITHUB_TOKEN through"):
        session_network(passed, network=network)
    with pytest.raises(ConfigError, match="env DSH_SANDBOX_NETWORK replaces the allowlist"):
        session_network(passed, network=False, source="env DSH_SANDBOX_NETWORK")
    # Without the passthrough the variable never reaches the command: the flag wins as usual.
    assert session_network(load_profile(write(tmp_path, "q", SECRET)), network=network) == (network, None)


def policy_with_secrets(tmp_path: Path) -> SandboxPolicy:
    rules = load_profile(write(tmp_path, "p", SECRET)).network_allowlist
    return SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=str(tmp_path), network_allowlist=rules)


def test_a_runner_without_secret_support_refuses_before_anything_runs(tmp_path: Path) -> None:
    runner = FakeRunner()
    runner.network_by_name = True  # type: ignore[misc]  # it could hold the allowlist, not its secrets
    policy = policy_with_secrets(tmp_path)
    assert runner.refuses_network_of(policy) is None
    assert network_refusal(runner, policy) == NO_SECRETS
    assert "(bwrap, docker and landlock can)" in NO_SECRETS and "--allow-domain" not in NO_SECRETS
    with pytest.raises(SandboxUnavailable, match="cannot keep secrets out of the sandbox"):
        runner.prepare(("touch", str(tmp_path / "ran")), policy, cwd=str(tmp_path), env={})
    assert runner.calls == []
