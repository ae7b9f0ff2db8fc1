"""Profiles: built-ins, the JSON Schema, validation errors with lines and fixes, extends."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dsh.sandbox.errors import ConfigError, UsageError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.profile_schema import LIMIT_KEYS, TOP_KEYS, parse_size
from dsh.sandbox.profiles import (
    Profile,
    ProfileError,
    builtin_profile_names,
    list_profiles,
    load_profile,
    validate_profile_file,
)
from dsh.sandbox.toml_lines import find_key_line

from tests.sandbox.schema_check import errors as schema_errors

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"
SCHEMA: dict[str, Any] = json.loads((PROFILES_DIR / "schema.json").read_text())
BUILTINS = ["danger-full-access", "node", "python", "read-only", "workspace-write"]


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def invalid(tmp_path: Path, text: str) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        validate_profile_file(write(tmp_path, text))
    return info.value


# -- built-ins and the schema ------------------------------------------------------------
def test_builtins_are_listed_and_load() -> None:
    assert builtin_profile_names() == BUILTINS
    profiles = {p.name: p for p in list_profiles()}
    assert sorted(profiles) == BUILTINS
    assert all(p.builtin and p.description for p in profiles.values())
    assert validate_profile_file(PROFILES_DIR / "python.toml").builtin
    for mode in SandboxMode:
        assert profiles[mode.value].mode is mode
    assert profiles["danger-full-access"].network is True
    assert profiles["read-only"].network is False


def test_realistic_profiles() -> None:
    python, node = load_profile("python"), load_profile("node")
    assert python.mode is node.mode is SandboxMode.WORKSPACE_WRITE  # inherited via extends
    assert python.chain == ("python", "workspace-write")
    assert python.network is False and node.network is True
    assert ".env" in python.hidden_paths and ".env" in node.hidden_paths
    assert python.limits.max_memory_bytes == 4 * 1024**3


@pytest.mark.parametrize("name", BUILTINS)
def test_shipped_profile_matches_schema(name: str) -> None:
    data = tomllib.loads((PROFILES_DIR / f"{name}.toml").read_text())
    assert schema_errors(data, SCHEMA, SCHEMA) == []
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        return
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)


def test_schema_and_loader_know_the_same_keys() -> None:
    assert set(SCHEMA["properties"]) == set(TOP_KEYS)
    assert set(SCHEMA["properties"]["limits"]["properties"]) == set(LIMIT_KEYS)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(
    "data",
    [
        {"netwrok": True},
        {"mode": "full"},
        {"network": "yes"},
        {"limits": {"max_memory": "12 parsecs"}},
        {"limits": {"max_processes": 0}},
        {"limits": {"max_processes": 3}},
        {"limits": {"wall_time_s": 0.0000001}},
        {"limits": {"cpu": 1}},
        {"protected_names": ["/abs"]},
        {"protected_names": ["../up"]},
        {"env_passthrough": ["A-B"]},
        {"writable_roots": [""]},
    ],
)
def test_schema_and_loader_both_reject(tmp_path: Path, data: dict[str, Any]) -> None:
    assert schema_errors(data, SCHEMA, SCHEMA) != []
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"[{key}]")
            lines.extend(f"{k} = {json.dumps(v)}" for k, v in value.items())
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    with pytest.raises(ProfileError):
        validate_profile_file(write(tmp_path, "\n".join(lines) + "\n"))


# -- validation errors ------------------------------------------------------------------
def test_unknown_key_names_line_and_suggests(tmp_path: Path) -> None:
    err = invalid(tmp_path, '# a profile\ndescription = "x"\nmode = "read-only"\nnetwrok = true\n')
    assert err.code == "PROFILE_INVALID"
    assert isinstance(err, ConfigError) and isinstance(err, UsageError)
    assert err.line == 4 and err.key == "netwrok"
    assert "unknown key 'netwrok' at line 4; did you mean 'network'?" in str(err)
    assert str(tmp_path / "p.toml") in str(err)


def test_unknown_key_without_close_match_lists_known(tmp_path: Path) -> None:
    err = invalid(tmp_path, "zzzzzz = 1\n")
    assert err.line == 1 and "known keys:" in str(err) and "writable_roots" in str(err)


def test_unknown_limit_key_in_table(tmp_path: Path) -> None:
    text = 'mode = "workspace-write"\n\n[limits]\nwall_time_s = 5\nmax_memry = "1G"\n'
    err = invalid(tmp_path, text)
    assert err.line == 5 and err.key == "limits.max_memry"
    assert "did you mean 'max_memory'?" in str(err)


def test_bad_value_in_dotted_and_inline_limits(tmp_path: Path) -> None:
    err = invalid(tmp_path, 'mode = "read-only"\nlimits.max_memory = "12 parsecs"\n')
    assert err.line == 2 and "'12 parsecs' is not a size" in str(err) and "512MiB" in str(err)
    err = invalid(tmp_path, 'mode = "read-only"\n\nlimits = { max_processes = -3 }\n')
    assert err.line == 3 and "whole number from 4 to 4194304" in str(err)


def test_key_with_same_name_in_other_table_is_not_matched() -> None:
    text = "[limits]\nmax_memory = 1\n[other]\nmax_memory = 2\n"
    assert find_key_line(text, "max_memory", "limits") == 2
    assert find_key_line(text, "max_memory", "other") == 4
    assert find_key_line(text, "max_memory") is None


def test_bad_mode_suggests(tmp_path: Path) -> None:
    err = invalid(tmp_path, '\nmode = "workspace_write"\n')
    assert err.line == 2 and "did you mean 'workspace-write'?" in str(err)


def test_bad_bool_says_how_to_write_it(tmp_path: Path) -> None:
    err = invalid(tmp_path, 'network = "false"\n')
    assert err.line == 1 and "true or false" in str(err)


def test_unknown_runner_lists_known(tmp_path: Path) -> None:
    err = invalid(tmp_path, 'mode = "read-only"\nallowed_runners = ["bwarp"]\n')
    assert err.line == 2 and "unknown runner 'bwarp'" in str(err)
    assert "did you mean 'bwrap'?" in str(err)
    for name in ("landlock", "bwrap", "seatbelt", "docker", "e2b"):
        assert name in str(err)


def test_env_passthrough_names_and_prefixes(tmp_path: Path) -> None:
    path = write(tmp_path, 'env_passthrough = ["NODE_ENV", "NPM_CONFIG_*", "_x1"]\n')
    assert validate_profile_file(path).env_passthrough == ("NODE_ENV", "NPM_CONFIG_*", "_x1")
    for bad in ("*", "A*B", "1A"):
        assert "not an environment variable name" in str(
            invalid(tmp_path, f'env_passthrough = ["{bad}"]\n')
        )
        assert schema_errors({"env_passthrough": [bad]}, SCHEMA, SCHEMA) != []


def test_bad_list_items(tmp_path: Path) -> None:
    bad_env = invalid(tmp_path, 'env_passthrough = ["A B"]\n')
    assert "not an environment variable name" in str(bad_env)
    assert "list of strings" in str(invalid(tmp_path, 'hidden_paths = ".env"\n'))
    assert "not a name relative" in str(invalid(tmp_path, 'protected_names = ["~/.ssh"]\n'))
    assert "degraded" in str(invalid(tmp_path, 'accept_degraded = ["Landlock Paths"]\n'))


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    err = invalid(tmp_path, 'mode = "read-only"\nnetwork = tru\n')
    assert "invalid TOML" in str(err) and "line 2" in str(err)


def test_unreadable_profiles(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ProfileError, match="file not found"):
        load_profile(str(missing))
    with pytest.raises(ProfileError, match="is a directory"):
        validate_profile_file(tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b'mode = "\xff"\n')
    with pytest.raises(ProfileError, match="not UTF-8"):
        load_profile(str(binary))


def test_unknown_builtin_suggests() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("pyton")
    assert "did you mean 'python'?" in str(info.value) and "workspace-write" in str(info.value)


def test_sizes() -> None:
    assert parse_size(4096) == 4096
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size("1G") == 1024**3
    assert parse_size("10 MB") == 10_000_000
    assert parse_size("1.5k") == 1536
    for bad in ("", "1 parsec", "0", -1, True, 1.5, "1e400", "2000000TiB", 2**60, float("nan")):
        with pytest.raises(ConfigError, match="size"):
            parse_size(bad)


# -- extends -------------------------------------------------------------------------------
def test_extends_chain_merges(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    write(
        tmp_path,
        'description = "base"\nextends = "python"\nnetwork = true\n'
        'writable_roots = ["/opt/cache"]\nallowed_runners = ["bwrap", "landlock"]\n'
        "[limits]\nmax_processes = 64\n",
        "base.toml",
    )
    child_path = write(
        sub,
        'extends = "../base.toml"\nhidden_paths = ["secrets"]\nallowed_runners = ["bwrap"]\n'
        "[limits]\nwall_time_s = 9\n",
        "child.toml",
    )
    child = load_profile(str(child_path))
    assert isinstance(child, Profile) and not child.builtin
    assert child.chain == ("child", "base", "python", "workspace-write")
    assert child.mode is SandboxMode.WORKSPACE_WRITE  # from workspace-write, two levels up
    assert child.network is True  # base overrides python's false
    assert child.writable_roots == ("/opt/cache",)
    assert child.hidden_paths == (".env", "secrets")  # lists are unions
    assert child.allowed_runners == ("bwrap",)  # replaced, not merged
    assert child.limits.wall_time_s == 9 and child.limits.max_processes == 64
    assert child.limits.max_memory_bytes == 4 * 1024**3  # from python
    assert child.description == ""  # not inherited


def test_extends_cycle_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, 'extends = "./b.toml"\n', "a.toml")
    write(tmp_path, 'extends = "./a.toml"\n', "b.toml")
    with pytest.raises(ProfileError, match=r"extends cycle: a -> b -> a"):
        load_profile(str(tmp_path / "a.toml"))
    write(tmp_path, 'extends = "./self.toml"\n', "self.toml")
    with pytest.raises(ProfileError, match="extends cycle"):
        load_profile(str(tmp_path / "self.toml"))


def test_extends_missing_parent_names_the_child(tmp_path: Path) -> None:
    path = write(tmp_path, 'extends = "no-such-profile"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert str(path) in str(info.value) and "extends" in str(info.value)
    path = write(tmp_path, 'mode = "read-only"\nextends = "./gone.toml"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert info.value.path == str(path) and info.value.line == 2
    assert f"extends at line 2: {tmp_path / 'gone.toml'} not found" in str(info.value)


def test_error_in_parent_points_at_parent(tmp_path: Path) -> None:
    write(tmp_path, 'mode = "read-only"\nnetwrk = false\n', "parent.toml")
    child = write(tmp_path, 'extends = "./parent.toml"\n', "child.toml")
    with pytest.raises(ProfileError) as info:
        load_profile(str(child))
    assert info.value.path == str(tmp_path / "parent.toml") and info.value.line == 2


def test_a_relative_home_finds_built_ins_and_refuses_to_look_for_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", "rel")
    assert load_profile("python").builtin
    with pytest.raises(ProfileError, match="HOME='rel' is not an absolute path"):
        load_profile("mine")
