"""What a project's ``.dsh/config.toml`` may not set on its own.

The project file lives in the workspace, written by whoever wrote the
repository: an agent run on a cloned repository must not have its sandbox
widened, or moved elsewhere, by that repository.  A value it sets is refused
when it differs from what applies without it (the flags, the variables and
your own file) in a way that weakens the sandbox or chooses where and in what
the command runs: a wider mode, network on, an accepted degradation, another
profile, an approval that can widen, environment variables, the runner, or a
runner option.  Trusting the project (``--trust-project``, ``trusted_projects``)
lifts this; ``dsh.cli.settings`` decides when it applies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.cli.config_files import ConfigFile, Value
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode

if TYPE_CHECKING:
    from dsh.sandbox.runner import ConfigKey

#: (single values, accepted degradations, env), each name -> its Value.
Merged = tuple[dict[str, "Value"], dict[str, "Value"], dict[str, "Value"]]


@dataclass(frozen=True)
class Refusal:
    """A project value that would weaken the sandbox: where, what, why."""

    key: str
    value: Any
    where: str
    why: str



def weakenings(merged: Merged, project: ConfigFile, without: Merged,
                runner_keys: Mapping[str, ConfigKey]) -> tuple[Refusal, ...]:
    """Every effective project value that widens the sandbox beyond what
    applies without the project file (``without``: the flags, variables and
    your own file merged)."""
    values, accepted, env = merged
    mine: dict[str, Any] = {key: value.value for key, value in without[0].items()}
    mine["accept_degraded"] = tuple(without[1])
    mine_env = without[2]
    ours = str(project.path)
    out: list[Refusal] = []
    for key, value in values.items():
        if not value.source.startswith(ours):
            continue
        why = _widens(key, value.value, mine, runner_keys.get(key))
        if why is not None:
            out.append(Refusal(key, value.value, value.source, why))
    for name, value in accepted.items():
        if value.source.startswith(ours) and name not in mine["accept_degraded"]:
            out.append(Refusal("accept_degraded", name, value.source, "it accepts a runner that enforces less"))
    for name, value in env.items():
        if value.source.startswith(ours) and (name not in mine_env or mine_env[name].value != value.value):
            out.append(Refusal(f"env.{name}", value.value, value.source,
                               "variables reach the runner's own processes on the host (LD_PRELOAD, PATH...)"))
    return tuple(sorted(out, key=lambda r: _line(r.where)))


def _line(where: str) -> int:
    tail = where.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def _widens(key: str, value: Any, mine: Mapping[str, Any], spec: ConfigKey | None) -> str | None:
    if key == "mode":
        floor = _mode_without_project(mine)
        if SandboxMode.parse(value).is_more_permissive_than(floor):
            return f"it is wider than {floor.value}, the mode without the project file"
    elif key == "network" and value and not mine.get("network"):
        return "it turns the network on"
    elif key == "profile" and value != mine.get("profile"):
        if mine.get("profile") is not None:
            # Another profile drops yours: its hidden paths, limits, runners.
            return f"it replaces your profile {mine['profile']!r}"
        if value not in _MODES:
            return "a profile can add writable roots, network and accepted degradations"
        if SandboxMode.parse(value).is_more_permissive_than(_mode_without_project(mine)):
            return f"it is wider than {_mode_without_project(mine).value}, the mode without the project file"
    elif key == "approval" and value not in (None, "deny") and value != mine.get("approval"):
        # A command's own output is the evidence a prompt or a rules file is shown:
        # it can claim a denial to be offered a wider mode.
        return "it lets a command ask for a wider mode (by prompt or by rules file)"
    elif key == "runner" and value != mine.get("runner"):
        # Runners differ in what they enforce (one keeps .git read-only, another
        # cannot), and a remote one uploads the workspace to a machine it names.
        return ("it chooses the runner: runners differ in what they enforce, and a remote one "
                "uploads the workspace")
    elif key.startswith("runners.") and value != mine.get(key):
        # An image, a template, a key source: what the command runs in, or where.
        return spec.weakens if spec is not None and spec.weakens else (
            "runner options choose what the command runs in (an image, a remote template)"
        )
    return None


def _mode_without_project(mine: Mapping[str, Any]) -> SandboxMode:
    """The mode in effect without the project file: yours, else your profile's."""
    if mine.get("mode"):
        return SandboxMode.parse(mine["mode"])
    profile = mine.get("profile")
    if profile in _MODES:
        return SandboxMode.parse(profile)
    if profile is not None:
        from dsh.sandbox.profiles import load_profile

        mode = load_profile(os.path.expanduser(str(profile))).mode
        if mode is not None:
            return mode
    return SandboxMode.WORKSPACE_WRITE


_MODES = tuple(m.value for m in SandboxMode)


def weakening_error(refusal: Refusal, project: ConfigFile, user_file: Path, count: int) -> ConfigError:
    root = project.path.parent.parent
    more = f" (and {count - 1} more: dsh-sandbox config show lists them)" if count > 1 else ""
    shown = refusal.key if refusal.key.startswith("env.") else (
        f"accept_degraded {refusal.value!r}" if refusal.key == "accept_degraded" else
        f"{refusal.key} = {refusal.value!r}"
    )
    return ConfigError(
        f"{refusal.where}: the project config sets {shown}, which would weaken the sandbox ({refusal.why}){more}; "
        "a project file may come from anyone (a cloned repository), so it may not do that on its own. Set it "
        f"in your own config ({user_file}) or with a flag, or trust this project: "
        f"trusted_projects = [\"{root}\"] in {user_file}, or --trust-project"
    )
