"""The effective configuration of one ``run`` or ``tool call``, with provenance.

Precedence, highest first: flags, ``DSH_SANDBOX_*`` environment variables, the
project's ``.dsh/config.toml``, the user's config file, built-in defaults.
Each value remembers where it came from (``flag --mode``, ``env
DSH_SANDBOX_MODE``, ``FILE:LINE``, ``default``) for ``config show``.

The project file lives in the workspace, which is whoever wrote the
repository: an agent run on a cloned repository must not have its sandbox
widened by that repository.  So a value the project file sets that would
weaken the sandbox (a wider mode, network on, an accepted degradation, a
profile, rules-file approval, environment variables, a runner option its runner
declares weakening, such as which variable holds a cloud key) is
refused unless the user trusts the project: ``--trust-project``, or the
project's directory listed in ``trusted_projects`` of the user's own file.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.cli.config_files import (
    IMAGE_KEY,
    ConfigFile,
    Value,
    configurable_runners,
    find_user_config,
    project_config_path,
    read_config,
    runner_config_keys,
)
from dsh.cli.project_trust import Merged, Refusal, weakening_error, weakenings
from dsh.sandbox.errors import ConfigError, UsageError
from dsh.sandbox.input_files import check_path, path_problem
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy_paths import canonical

if TYPE_CHECKING:
    from dsh.sandbox.runner import ConfigKey

#: Single-valued keys and their built-in defaults (``None``: the profile decides).
#: Each runner's ``runners.NAME.KEY`` options (``Runner.CONFIG_KEYS``) default to ``None``.
DEFAULTS: Mapping[str, Any] = {
    "profile": None,
    "mode": None,
    "runner": "auto",
    "approval": None,
    "network": None,
}
ENV_VARS: Mapping[str, str] = {
    "profile": "DSH_SANDBOX_PROFILE",
    "mode": "DSH_SANDBOX_MODE",
    "runner": "DSH_SANDBOX_RUNNER",
    "approval": "DSH_SANDBOX_APPROVAL",
    "network": "DSH_SANDBOX_NETWORK",
    "accept_degraded": "DSH_SANDBOX_ACCEPT_DEGRADED",
}
_FLAG_NAMES: Mapping[str, str] = {
    "network": "--network/--no-network",
    "accept_degraded": "--accept-degraded",
}
AUTO_RUNNER = DEFAULTS["runner"]
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


@dataclass(frozen=True)
class Flags:
    """What the command line set (``None``/empty: not given)."""

    profile: str | None = None
    mode: str | None = None
    runner: str | None = None
    approval: str | None = None
    network: bool | None = None
    accept_degraded: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    image: str | None = None
    trust_project: bool = False


@dataclass(frozen=True)
class Settings:
    values: Mapping[str, Value]  # every key of DEFAULTS, then of runner_keys
    accept_degraded: tuple[tuple[str, Value], ...]
    env: tuple[tuple[str, Value], ...]
    user_file: Path
    user_found: bool
    project_file: Path | None
    trusted: Value  # may the project file weaken the sandbox?
    #: ``runners.NAME.KEY`` -> its declaration, for the runners configured (or all, for ``config show``).
    runner_keys: Mapping[str, ConfigKey] = dataclasses.field(default_factory=dict)
    #: What the project file set that was not applied (``config show`` only: a run refuses).
    refused: tuple[Refusal, ...] = ()
    user_real: str | None = None  # the real path of the user's file that was read

    def __getitem__(self, key: str) -> Any:
        return self.values[key].value

    def accepted(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.accept_degraded)

    def env_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, value.value) for name, value in self.env)

    def runner_options(self, environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """Options for the runner host: only what was configured."""
        options: dict[str, dict[str, Any]] = {}
        for dotted, spec in self.runner_keys.items():
            value = self[dotted]
            if value is None:
                continue
            _, name, key = dotted.split(".", 2)
            if spec.env_for is None:
                options.setdefault(name, {})[key] = value
            elif environ.get(value):
                # Unset: no option, and the runner says what is missing.
                options.setdefault(name, {})[spec.env_for] = environ[value]
        return options

    def rows(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) for every setting, in display order."""
        out: list[tuple[str, Any, str]] = [(k, v.value, v.source) for k, v in self.values.items()]
        out += [("accept_degraded", name, v.source) for name, v in self.accept_degraded]
        out += [(f"env.{name}", v.value, v.source) for name, v in self.env]
        return out


def resolve(flags: Flags, environ: Mapping[str, str], workspace: Path, every_runner: bool = False,
            keep_refused: bool = False) -> Settings:
    """Read both files and merge every layer; ``ConfigError`` names file, key and fix.

    ``every_runner``: list the options of every runner that declares some, not
    only of those configured (importing each runner: for ``config show``).
    ``keep_refused``: a project value that would weaken the sandbox is left out
    and listed in ``Settings.refused`` instead of raising (``config show``)."""
    check_environment(environ)
    check_path("--workspace", os.fspath(workspace), "pass a shorter path")
    user_path = find_user_config(environ)
    user = read_config(user_path, "user") if user_path is not None else None
    # ``canonical``: a name swapped for a link meanwhile is a clean error, not an OSError.
    project_path = project_config_path(canonical(os.path.expanduser(workspace)))
    project = read_config(project_path, "project") if project_path is not None else None
    # Highest precedence first: each layer is (source of a key, its values).
    layers = [_flag_layer(flags), _env_layer(environ)]
    layers += [_file_layer(f) for f in (project, user) if f is not None]
    for layer in layers:
        _check(layer)
    if flags.image is not None:
        runner = _first(layers, "runner", DEFAULTS["runner"])
        _check_image_flag(runner)
        layers[0][f"runners.{runner.value}.{IMAGE_KEY}"] = Value(flags.image, "flag --image")
    names = configurable_runners() if every_runner else []
    names += sorted({key.split(".")[1] for layer in layers for key in layer if key.startswith("runners.")} - {*names})
    runner_keys = {f"runners.{name}.{key}": spec for name in names for key, spec in runner_config_keys(name).items()}
    defaults = {**DEFAULTS, **dict.fromkeys(runner_keys)}
    trusted = _trust(flags, user, project)
    refused: tuple[Refusal, ...] = ()
    if project is not None and not trusted.value:
        # What applies without the project file: flags, variables, your own file.
        without = layers[:2] + ([_file_layer(user)] if user is not None else [])
        refused = weakenings(_merged(layers, defaults), project, _merged(without, defaults), runner_keys)
        if refused and not keep_refused:
            first = refused[0]
            raise weakening_error(first, project, user_path or _user_file(environ), len(refused))
        project_layer = layers[2]
        for refusal in refused:
            project_layer.pop(refusal.key, None)
    values, accepted, env = _merged(layers, defaults)
    return Settings(
        values, tuple(accepted.items()), tuple(sorted(env.items())),
        user_path or _user_file(environ), user is not None, project_path, trusted, runner_keys,
        refused, user.real if user is not None else None,
    )


def _merged(layers: list[Layer], defaults: Mapping[str, Any]) -> Merged:
    """(single values, accepted degradations, env) from ``layers``, highest first."""
    values = {key: _first(layers, key, default) for key, default in defaults.items()}
    accepted: dict[str, Value] = {}
    env: dict[str, Value] = {}
    for layer in layers:
        for key, value in layer.items():
            if key == "accept_degraded":
                for name in value.value:
                    accepted.setdefault(name, Value(name, value.source))
            elif key.startswith("env."):
                env.setdefault(key[4:], value)
    return values, accepted, env


def _user_file(environ: Mapping[str, str]) -> Path:
    from dsh.cli.config_files import user_config_path

    return user_config_path(environ)


#: Variables that name directories the CLI and the sandbox build paths from.
PATH_VARIABLES = ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "TMPDIR")


def check_environment(environ: Mapping[str, str]) -> None:
    """``ConfigError`` for a path variable no path can be built from."""
    for var in PATH_VARIABLES:
        value = environ.get(var)
        problem = path_problem(value) if value else None
        if problem is not None:
            raise ConfigError(
                f"environment variable {var}: {problem}; set {var} to an existing directory "
                "with a shorter path, or unset it"
            )


# -- layers ----------------------------------------------------------------------------
Layer = dict[str, Value]


def _flag_layer(flags: Flags) -> Layer:
    layer: Layer = {}
    for key in ("profile", "mode", "runner", "approval", "network"):
        value = getattr(flags, key)
        if value is not None:
            layer[key] = Value(value, f"flag {_FLAG_NAMES.get(key, '--' + key)}")
    if flags.accept_degraded:
        # A comma-separated list, as DSH_SANDBOX_ACCEPT_DEGRADED takes, or repeated flags.
        names = tuple(n.strip() for v in flags.accept_degraded for n in v.split(",") if n.strip())
        layer["accept_degraded"] = Value(names, "flag --accept-degraded")
    for name, value in flags.env:
        layer[f"env.{name}"] = Value(value, f"flag --env {name}")
    return layer


def _env_layer(environ: Mapping[str, str]) -> Layer:
    layer: Layer = {}
    for key, var in ENV_VARS.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        source = f"env {var}"
        if key == "network":
            if raw.lower() not in _BOOLS:
                raise ConfigError(f"{var}={raw!r}: not a boolean; set it to 1 or 0 (true/false) or unset it")
            layer[key] = Value(_BOOLS[raw.lower()], source)
        elif key == "accept_degraded":
            layer[key] = Value(tuple(n.strip() for n in raw.split(",") if n.strip()), source)
        else:
            layer[key] = Value(raw, source)
    return layer


def _file_layer(config: ConfigFile) -> Layer:
    return {key: Value(value, config.where(key)) for key, value in config.values.items()}


def _first(layers: list[Layer], key: str, default: Any) -> Value:
    for layer in layers:
        if key in layer:
            return layer[key]
    return Value(default, "default")


def _check(layer: Layer) -> None:
    """Each value is checked where it was written, so the error names that place
    (``--mode``, ``env DSH_SANDBOX_MODE: mode``, ``FILE:LINE: mode``)."""
    for key, value in layer.items():
        flag = value.source.startswith("flag ")
        label = value.source[len("flag "):] if flag else f"{value.source}: {key}"
        if key in ("profile", "approval") and isinstance(value.value, str):
            problem = path_problem(value.value)
            if problem is not None:
                raise ConfigError(f"{label}: {problem}; give a shorter name or path")
        if key == "mode":
            SandboxMode.parse(value.value, field=label)
        elif key == "runner":
            from dsh.sandbox.registry import check_runner_name

            try:
                check_runner_name(value.value)
            except ConfigError as exc:
                raise ConfigError(f"--{exc}" if flag else f"{value.source}: {exc}") from None
        elif key == "approval":
            from dsh.sandbox.approval import approval_option

            approval_option(value.value, flag=label)
        elif key == "accept_degraded":
            for name in value.value:
                check_degradation(name, label)


def _check_image_flag(runner: Value) -> None:
    """``--image`` sets the image of a runner that declares one: any other runner is a mistake."""
    if runner.value != AUTO_RUNNER and IMAGE_KEY in runner_config_keys(runner.value):
        return
    takers = configurable_runners(IMAGE_KEY)
    if not takers:
        raise UsageError("--image: no installed runner takes an image; drop --image")
    raise UsageError(
        f"--image: sets the {' or '.join(takers)} runner's image, but the runner is {runner.value} "
        f"({runner.source}); add " + " or ".join(f"--runner {n}" for n in takers) + " or drop --image"
    )


def check_degradation(name: str, label: str) -> None:
    """Unknown names are refused with every name a registered runner reports."""
    from dsh.sandbox.profile_schema import degradation_problem, known_degradations

    if degradation_problem(name) is None:
        return
    from dsh.sandbox.gate import HOST_DEGRADATIONS

    valid = sorted({*known_degradations(), *HOST_DEGRADATIONS})
    raise ConfigError(
        f"{label}: {name!r} is not a degradation any runner reports; "
        f"use one of: {', '.join(valid)} (dsh-sandbox runners shows which apply here)"
    )


# -- the project file may not widen the sandbox on its own --------------------------------
def _trust(flags: Flags, user: ConfigFile | None, project: ConfigFile | None) -> Value:
    if flags.trust_project:
        return Value(True, "flag --trust-project")
    if user is not None and project is not None:
        root = project.path.parent.parent
        for raw in user.values.get("trusted_projects", ()):
            if canonical(os.path.expanduser(raw)) == canonical(root):
                return Value(True, user.where("trusted_projects"))
    return Value(False, "default")
