"""Finding, reading and checking the configuration files of ``dsh-sandbox``.

Two files, both TOML with the same keys (``docs/configuration.md``):

- the user's, ``$XDG_CONFIG_HOME/dsh-sandbox/config.toml`` (default
  ``~/.config/dsh-sandbox/config.toml``);
- the project's, ``.dsh/config.toml`` in the workspace or its nearest ancestor
  up to the repository root (the directory holding ``.git``).  Outside a
  repository only the workspace itself is looked at: walking up to ``/`` would
  pick up a file anyone can plant, e.g. ``/tmp/.dsh/config.toml``.

Every problem is a ``ConfigError`` naming the file, the line, the key and the
fix; nothing here decides precedence (``settings`` does).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.sandbox.errors import ConfigError

if TYPE_CHECKING:
    from dsh.sandbox.runner import ConfigKey

#: Top-level keys; each ``[runners.NAME]`` table takes the keys its runner declares.
TOP_KEYS = ("profile", "mode", "runner", "approval", "network", "accept_degraded", "env", "runners",
            "trusted_projects")
#: The key ``--image`` sets, for the runners that declare it.
IMAGE_KEY = "image"
#: Only the user's own file may say which projects it trusts.
USER_ONLY = ("trusted_projects",)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The names the subprocess layer drops from the inherited environment.
CREDENTIAL_NAME = re.compile(r"KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)


@dataclass(frozen=True)
class ConfigFile:
    """One parsed, checked file: ``values`` maps dotted keys (``runners.NAME.KEY``,
    ``env.NAME``) to values, ``lines`` the same keys to 1-based lines."""

    path: Path
    kind: str  # "user" | "project"
    values: Mapping[str, Any]
    lines: Mapping[str, int]

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else str(self.path)


def user_config_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME", "")
    # A relative XDG_CONFIG_HOME is invalid by the spec: ignored.
    root = Path(base) if os.path.isabs(base) else Path(os.path.expanduser("~")) / ".config"
    return root / "dsh-sandbox" / "config.toml"


def runner_config_keys(name: str) -> Mapping[str, ConfigKey]:
    """What runner ``name`` declares a config file may set (its class is imported:
    only when a file or a flag configures it, so a plain ``run`` stays fast)."""
    from dsh.sandbox.host import RunnerLoadError, load_runner_class

    try:
        return load_runner_class(name).CONFIG_KEYS
    except RunnerLoadError as exc:
        raise ConfigError(f"runners.{name}: {exc}; install it (dsh-sandbox runners) or remove the table") from None


def configurable_runners(key: str | None = None) -> list[str]:
    """The runners that declare config keys (``key`` among them, if given)."""
    from dsh.sandbox.host import runner_classes

    return [name for name, cls in runner_classes().items()
            if cls.CONFIG_KEYS and (key is None or key in cls.CONFIG_KEYS)]


def project_config_path(workspace: Path) -> Path | None:
    """The nearest ``.dsh/config.toml`` from ``workspace`` up to the repository root."""
    chain = [workspace, *workspace.parents]
    repo = next((d for d in chain if os.path.lexists(d / ".git")), None)
    searched = chain[: chain.index(repo) + 1] if repo is not None else [workspace]
    for directory in searched:
        candidate = directory / ".dsh" / "config.toml"
        if candidate.is_file():
            return candidate
    return None


def read_config(path: Path, kind: str) -> ConfigFile:
    """Parse and check one file (``ConfigError`` naming file, line, key and fix)."""
    import tomllib  # only when a file exists: `run` without one stays fast

    from dsh.sandbox.profile_schema import find_key_line

    if kind == "project":
        _check_owner(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc}); fix its permissions or remove it") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    checker = _Checker(path, kind, text, find_key_line)
    values = checker.check(data)
    return ConfigFile(path, kind, values, checker.lines)


def _check_owner(path: Path) -> None:
    """A project file another user could write configures this user's sandbox:
    refuse it, as ssh refuses a group-writable config."""
    st = path.stat()
    if st.st_uid not in (os.geteuid(), 0):
        raise ConfigError(
            f"{path}: owned by uid {st.st_uid}, not by you; another user could have written it. "
            "Remove it, or take it over (chown) if you trust its contents"
        )
    if st.st_mode & 0o022:
        raise ConfigError(
            f"{path}: writable by group or others (mode {st.st_mode & 0o777:o}), so anyone could "
            f"change this sandbox's configuration; chmod go-w {path}"
        )


class _Checker:
    def __init__(self, path: Path, kind: str, text: str, find_line: Any) -> None:
        self.path = path
        self.kind = kind
        self.text = text
        self.find_line = find_line
        self.lines: dict[str, int] = {}

    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        table, _, leaf = key.rpartition(".")
        line = self.find_line(self.text, leaf, table or None)
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{where}: {key}: {problem}; {fix}")

    def note(self, key: str) -> None:
        table, _, leaf = key.rpartition(".")
        line = self.find_line(self.text, leaf, table or None)
        if line:
            self.lines[key] = line

    def check(self, data: Mapping[str, Any]) -> dict[str, Any]:
        from dsh.sandbox.profile_schema import suggest

        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in TOP_KEYS:
                close = suggest(key, TOP_KEYS)
                fix = f"did you mean '{close}'?" if close else "known keys: " + ", ".join(TOP_KEYS)
                raise self.fail(key, "unknown key", fix)
            if key in USER_ONLY and self.kind == "project":
                raise self.fail(key, "only your own config may name trusted projects",
                                f"move it to {user_config_path(os.environ)}")
            if key == "runners":
                out.update(self._runners(value))
            elif key == "env":
                out.update(self._env(value))
            else:
                out[key] = self._value(key, value)
                self.note(key)
        return out

    def _value(self, key: str, value: Any) -> Any:
        if key == "network":
            if not isinstance(value, bool):
                raise self.fail(key, f"must be true or false, got {value!r}", "write network = false (no quotes)")
            return value
        if key in ("accept_degraded", "trusted_projects"):
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise self.fail(key, f"must be a list of non-empty strings, got {value!r}", f'write {key} = ["..."]')
            return tuple(value)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {value!r}", f'write {key} = "..."')
        if key == "profile" and ("/" in value or value.endswith(".toml")):
            # A profile file is named relative to the config file that names it.
            return str(self.path.parent / os.path.expanduser(value))
        return value

    def _runners(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail("runners", f"must be a table, got {value!r}", "write [runners.NAME] tables")
        out: dict[str, Any] = {}
        for name, table in value.items():
            from dsh.sandbox.host import check_runner_name

            try:
                check_runner_name(name)
            except ConfigError as exc:
                raise self.fail(f"runners.{name}", "not a runner", str(exc)) from None
            known = runner_config_keys(name)
            if not known:
                raise self.fail(f"runners.{name}", "no options for this runner",
                                "configure " + " or ".join(f"[runners.{n}]" for n in configurable_runners()))
            if not isinstance(table, dict):
                raise self.fail(f"runners.{name}", f"must be a table, got {table!r}",
                                f"write [runners.{name}] with " + ", ".join(known))
            secrets = {spec.env_for: key for key, spec in known.items() if spec.env_for}
            for key, item in table.items():
                dotted = f"runners.{name}.{key}"
                if key in secrets:
                    holder = secrets[key]
                    raise self.fail(dotted, "a key is never written in a config file",
                                    f'name the variable that holds it instead: {holder} = "{known[holder].example}"')
                spec = known.get(key)
                if spec is None:
                    raise self.fail(dotted, "unknown key", f"the {name} runner's keys here: " + ", ".join(known))
                if not isinstance(item, str) or not item.strip():
                    raise self.fail(dotted, f"must be a non-empty string, got {item!r}",
                                    f'write {key} = "{spec.example}"')
                if spec.env_for and not _ENV_NAME.match(item):
                    raise self.fail(dotted, f"{item!r} is not an environment variable name",
                                    f'name the variable that holds the {spec.env_for}, e.g. {key} = "{spec.example}"')
                out[dotted] = item
                self.note(dotted)
        return out

    def _env(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail("env", f"must be a table of NAME = \"value\", got {value!r}", '[env] NODE_ENV = "test"')
        out: dict[str, Any] = {}
        for name, item in value.items():
            dotted = f"env.{name}"
            problem = env_problem(name, item)
            if problem is None and CREDENTIAL_NAME.search(name):
                problem = (
                    f"{name} looks like a credential, and a config file does not hand credentials "
                    "to commands",
                    f"pass it explicitly for the run that needs it: --env {name}=VALUE",
                )
            if problem is not None:
                raise self.fail(dotted, *problem)
            out[dotted] = item
            self.note(dotted)
        return out


def env_problem(name: str, value: object) -> tuple[str, str] | None:
    """(problem, fix) for one variable set for the command, or ``None``."""
    if not _ENV_NAME.match(name):
        return f"{name!r} is not an environment variable name", "use letters, digits and '_', e.g. NODE_ENV"
    if name.startswith("DSH_"):
        return f"{name}: DSH_* variables are managed by dsh-sandbox", "choose another name"
    if not isinstance(value, str) or "\0" in value:
        return f"the value of {name} must be a string without NUL bytes", f'write {name} = "..."'
    return None
