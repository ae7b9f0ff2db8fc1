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
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.input_files import InputFileError, check_path, path_problem, read_input_file, text_problem
from dsh.sandbox.lazy_pattern import LazyPattern

if TYPE_CHECKING:
    from dsh.sandbox.runner import ConfigKey

#: Top-level keys; each ``[runners.NAME]`` table takes the keys its runner declares.
TOP_KEYS = ("profile", "mode", "runner", "approval", "network", "accept_degraded", "env", "runners",
            "trusted_projects")
#: The key ``--image`` sets, for the runners that declare it.
IMAGE_KEY = "image"
#: Only the user's own file may say which projects it trusts.
USER_ONLY = ("trusted_projects",)

_ENV_NAME = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The names the subprocess layer drops from the inherited environment.
CREDENTIAL_NAME = LazyPattern(r"KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)


@dataclass(frozen=True)
class Value:
    """A setting's value and where it came from, for ``config show`` and refusals."""

    value: Any
    source: str  # "default", "flag --mode", "env DSH_SANDBOX_MODE" or "FILE:LINE"


@dataclass(frozen=True)
class ConfigFile:
    """One parsed, checked file: ``values`` maps dotted keys (``runners.NAME.KEY``,
    ``env.NAME``) to values, ``lines`` the same keys to 1-based lines."""

    path: Path
    kind: str  # "user" | "project"
    values: Mapping[str, Any]
    lines: Mapping[str, int]
    real: str = ""  # the real path of the file that was read (from its descriptor)

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else str(self.path)


def user_config_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME", "")
    # A relative XDG_CONFIG_HOME is invalid by the spec: ignored.
    root = Path(base) if os.path.isabs(base) else Path(os.path.expanduser("~")) / ".config"
    if not root.is_absolute():
        # Relative to the cwd, the workspace's own files would be read as the user's.
        raise ConfigError(f"HOME={environ.get('HOME', '')!r} is not an absolute path, so your config file "
                          "cannot be found safely; set HOME to your home directory, or XDG_CONFIG_HOME to an "
                          "absolute path")
    return root / "dsh-sandbox" / "config.toml"


def runner_config_keys(name: str) -> Mapping[str, ConfigKey]:
    """What runner ``name`` declares a config file may set (its class is imported:
    only when a file or a flag configures it, so a plain ``run`` stays fast)."""
    from dsh.sandbox.registry import RunnerLoadError, load_runner_class

    try:
        return load_runner_class(name).CONFIG_KEYS
    except RunnerLoadError as exc:
        raise ConfigError(f"runners.{name}: {exc}; install it (dsh-sandbox runners) or remove the table") from None


def configurable_runners(key: str | None = None) -> list[str]:
    """The runners that declare config keys (``key`` among them, if given)."""
    from dsh.sandbox.registry import runner_classes

    return [name for name, cls in runner_classes().items()
            if cls.CONFIG_KEYS and (key is None or key in cls.CONFIG_KEYS)]


def project_config_path(workspace: Path) -> Path | None:
    """The nearest ``.dsh/config.toml`` from ``workspace`` up to the repository top.

    The walk stops at what a sandboxed run could have planted: a ``.git`` that
    is a file or a link, or a directory another user owns, is no repository
    top (a run can write ``.git`` as a file in a parent it may write), so the
    walk ends below it; without a real top only the workspace counts.  A
    ``.dsh`` that is a link is refused (``ConfigError``).
    """
    for directory in _project_dirs(workspace):
        dsh = directory / ".dsh"
        try:
            st = os.lstat(dsh)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise ConfigError(f"{dsh}: cannot look for the project config ({exc.strerror}); "
                              "fix the permissions of the workspace") from None
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError(
                f"{dsh}: is a symbolic link (to {os.readlink(dsh)}); a project's .dsh must be a real "
                "directory, since a link could lead the configuration anywhere a sandboxed command "
                "wrote; replace it with the directory itself"
            )
        candidate = dsh / "config.toml"
        if stat.S_ISDIR(st.st_mode) and os.path.lexists(candidate):
            return candidate
    return None


def _project_dirs(workspace: Path) -> list[Path]:
    """The directories whose ``.dsh`` may configure ``workspace``: it and its
    parents up to the first real repository top, else the workspace alone."""
    walked: list[Path] = []
    for directory in (workspace, *workspace.parents):
        if directory != workspace and _anyone_can_write(directory):
            return [workspace]  # /tmp and the like: anyone could have planted its .git and .dsh
        kind = _git_kind(directory / ".git")
        if kind == "top":
            return [*walked, directory]
        if kind == "untrusted":
            # A worktree's .git file at the workspace makes it the top; one in a
            # parent may be planted, so it ends the walk below it.
            return [workspace] if directory == workspace else walked
        walked.append(directory)
    return [workspace]


def _anyone_can_write(directory: Path) -> bool:
    try:
        return bool(os.stat(directory).st_mode & stat.S_IWOTH)
    except OSError:
        return True  # cannot tell: do not walk on


def _git_kind(git: Path) -> str | None:
    """``"top"`` for a real ``.git`` directory owned by you (or root), ``None``
    when there is none, ``"untrusted"`` for anything else (file, link, another
    user's directory, one we cannot look at)."""
    try:
        st = os.lstat(git)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return "untrusted"
    if stat.S_ISDIR(st.st_mode) and st.st_uid in (os.geteuid(), 0):
        return "top"
    return "untrusted"


def find_user_config(environ: Mapping[str, str]) -> Path | None:
    """The user's config file if there is one; a directory on the way that
    cannot be searched is a ``ConfigError`` (HOME of another user, say)."""
    path = user_config_path(environ)
    check_path("your config file (from HOME or XDG_CONFIG_HOME)", str(path),
               "set XDG_CONFIG_HOME (or HOME) to a shorter path")
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:
        raise ConfigError(
            f"{path}: cannot look for your config file (permission denied on a directory of that path); "
            "set HOME (or XDG_CONFIG_HOME) to a directory you can read"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot look for your config file ({exc.strerror}); "
                          "set HOME (or XDG_CONFIG_HOME) to a directory you can read") from None
    return path


def read_config(path: Path, kind: str) -> ConfigFile:
    """Parse and check one file (``ConfigError`` naming file, line, key and fix).

    Read once from one descriptor (a regular file, bounded); the project's is
    not followed through a link and must be yours, not writable by others."""
    import tomllib  # only when a file exists: `run` without one stays fast

    from dsh.sandbox.toml_lines import find_key_line

    try:
        read = read_input_file(str(path), nofollow=kind == "project")
    except InputFileError as exc:
        raise ConfigError(f"{path}: {exc.problem}; {exc.fix}") from None
    if kind == "project":
        _check_owner(path, read.uid, read.mode)
    text = read.text
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    checker = _Checker(path, kind, text, find_key_line)
    values = checker.check(data)
    return ConfigFile(path, kind, values, checker.lines, read.real)


def _check_owner(path: Path, uid: int, mode: int) -> None:
    """A project file another user could write configures this user's sandbox:
    refuse it, as ssh refuses a group-writable config."""
    if uid not in (os.geteuid(), 0):
        raise ConfigError(
            f"{path}: owned by uid {uid}, not by you; another user could have written it. "
            "Remove it, or take it over (chown) if you trust its contents"
        )
    if mode & 0o022:
        raise ConfigError(
            f"{path}: writable by group or others (mode {mode & 0o777:o}), so anyone could "
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
            for item in value:
                problem = path_problem(item) if key == "trusted_projects" else text_problem(item, limit=255)
                if problem is not None:
                    raise self.fail(key, f"{item[:40]!r}: {problem}", "fix the entry")
            return tuple(value)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be a non-empty string, got {value!r}", f'write {key} = "..."')
        problem = path_problem(value) if key in ("profile", "approval") else text_problem(value, limit=255)
        if problem is not None:
            raise self.fail(key, f"{value[:40]!r}: {problem}", f'fix the value: {key} = "..."')
        if key == "profile" and ("/" in value or value.endswith(".toml")):
            # A profile file is named relative to the config file that names it.
            return str(self.path.parent / os.path.expanduser(value))
        return value

    def _runners(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail("runners", f"must be a table, got {value!r}", "write [runners.NAME] tables")
        out: dict[str, Any] = {}
        for name, table in value.items():
            from dsh.sandbox.registry import check_runner_name

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
                problem = text_problem(item)
                if problem is not None:
                    raise self.fail(dotted, problem, f'write {key} = "{spec.example}"')
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
    if len(os.fsencode(f"{name}={value}")) >= ENV_STRING_MAX:
        # The kernel refuses to start a program given a longer one (E2BIG).
        return (f"{name}=VALUE is over the kernel's {ENV_STRING_MAX - 1}-byte limit for one variable",
                "shorten the value, or pass a file name that holds it")
    return None


#: MAX_ARG_STRLEN on Linux: one environment string, NUL included.
ENV_STRING_MAX = 128 * 1024
