"""The registry: every runner is an entry point of ``dsh_sandbox.runners``, found by name here.

Built-in runners are registered there by this package's own metadata, exactly
like a third-party plugin, so no runner name is written anywhere else.

Reading entry points through ``importlib.metadata`` costs over 100 ms of
imports (email, zipfile, csv...) before a single file is read, which
``dsh-sandbox run`` cannot afford: ``entry_points_of`` reads the
``entry_points.txt`` of each ``*.dist-info`` / ``*.egg-info`` directory on
``sys.path`` directly (``entry_point_files``), once per process.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.sandbox import entry_point_files
from dsh.sandbox.errors import ConfigError

if TYPE_CHECKING:
    from dsh.sandbox.runner import Runner

RUNNER_GROUP = "dsh_sandbox.runners"
#: The runner name that lets the host choose.
AUTO = "auto"


@dataclass(frozen=True)
class EntryPoint:
    """``name = module:attr`` in ``group``, declared by distribution ``dist``."""

    name: str
    value: str
    group: str
    dist: str

    def load(self) -> object:
        import importlib

        module_name, _, attr = self.value.partition(":")
        target: object = importlib.import_module(module_name.strip())
        for part in attr.split("[")[0].strip().split(".") if attr else ():
            target = getattr(target, part)
        return target


def scan_entry_points(group: str, path: Iterable[str]) -> tuple[EntryPoint, ...]:
    """The entry points of ``group`` declared by the distributions on ``path``."""
    return tuple(EntryPoint(name, value, group, dist) for name, value, dist in entry_point_files.scan(group, path))


@functools.lru_cache(maxsize=8)
def _cached(group: str, path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    return scan_entry_points(group, path)


def entry_points_of(group: str) -> Mapping[str, EntryPoint]:
    """Name -> entry point of ``group`` for the current ``sys.path`` (cached per path)."""
    points: dict[str, EntryPoint] = {}
    for point in _cached(group, tuple(sys.path)):
        points.setdefault(point.name, point)  # the first on the path wins, as for modules
    return points


def runner_entry_points() -> Mapping[str, EntryPoint]:
    return entry_points_of(RUNNER_GROUP)


def _hint_dir() -> str | None:
    from dsh.sandbox.own_state import cache_base

    base = cache_base()
    return None if base is None else str(base / "dsh-sandbox")


_HINT = "auto-order.json"


def _fingerprint(points: Mapping[str, EntryPoint]) -> str:
    return repr((sys.version, sorted((p.name, p.value, p.dist) for p in points.values())))


def read_priorities(points: Mapping[str, EntryPoint]) -> dict[str, int | None] | None:
    """The ``auto_priority`` each runner declared when these entry points were last seen.

    Only a hint that spares importing every runner (an SDK import can cost
    more than the command) to learn its priority: the host checks the class of
    every runner it tries, so a stale or edited file can only change which
    fully-enforcing runner is tried first, or leave one out (fail closed).
    """
    import json

    from dsh.sandbox.own_dirs import read_regular_file

    hint_dir = _hint_dir()
    if hint_dir is None:
        return None
    read = read_regular_file(os.path.join(hint_dir, _HINT))
    if read is None:
        return None
    try:
        data = json.loads(read[1].decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("key") != _fingerprint(points):
        return None
    found = data.get("priorities")
    if not isinstance(found, dict) or set(found) != set(points):
        return None
    return {str(k): v if isinstance(v, int) and not isinstance(v, bool) else None for k, v in found.items()}


def write_priorities(points: Mapping[str, EntryPoint], priorities: Mapping[str, int | None]) -> None:
    import json
    from pathlib import Path

    from dsh.sandbox.errors import DshError
    from dsh.sandbox.own_dirs import open_own_dir, replace_file

    data = json.dumps({"key": _fingerprint(points), "priorities": dict(priorities)}).encode()
    hint_dir = _hint_dir()
    if hint_dir is None:
        return  # no home to keep it in: only costs the imports next time
    try:
        # Written as the caller (often root): the directory is reached without
        # following a link a sandboxed command could have planted, and the file
        # is made and renamed from its fd.
        own = open_own_dir(Path(hint_dir), "runner order hint", "the hint is skipped")
    except DshError:
        return  # only costs the imports next time
    try:
        replace_file(own, _HINT, data)  # one that cannot be written only costs the imports next time
    finally:
        own.close()



# -- runner classes by name ---------------------------------------------------------------
def known_runner_names() -> list[str]:
    """The registered runner names, in the order their distributions declare them."""
    return list(runner_entry_points())


def check_runner_name(name: str) -> str:
    """Return ``name`` if it names a runner (or ``auto``); else a ``ConfigError``."""
    if name == AUTO or name in runner_entry_points():
        return name
    known = ", ".join([AUTO, *known_runner_names()])
    raise ConfigError(f"runner: unknown runner {name!r}; use one of: {known}")


class RunnerLoadError(Exception):
    """A known runner's code cannot be imported (missing extra, broken install)."""


def load_runner_class(name: str) -> type[Runner]:
    """The runner class registered as ``name``.

    Raises ``ConfigError`` for an unknown name and ``RunnerLoadError`` when the
    name is known but its module does not import.
    """
    check_runner_name(name)
    try:
        cls = runner_entry_points()[name].load()
    except ImportError as exc:
        raise RunnerLoadError(f"runner code cannot be imported: {exc}") from exc
    except AttributeError as exc:
        raise RunnerLoadError(f"runner code is incomplete: {exc}") from exc
    except TypeError as exc:  # e.g. a runner class that replaces the shared preamble
        raise RunnerLoadError(f"runner code is refused: {exc}") from exc
    from dsh.sandbox.runner import Runner

    if not (isinstance(cls, type) and issubclass(cls, Runner)):
        raise RunnerLoadError(f"{name!r} does not name a Runner subclass")
    return cls


def runner_classes() -> dict[str, type[Runner]]:
    """Every registered runner class that imports here (for listings and checks)."""
    classes = {}
    for name in known_runner_names():
        try:
            classes[name] = load_runner_class(name)
        except RunnerLoadError:
            continue
    return classes


def auto_order(runners: Mapping[str, type[Runner] | Runner]) -> list[str]:
    """Names of the runners ``auto`` may pick, best (lowest ``auto_priority``) first."""
    ranked = [(r.auto_priority, name) for name, r in runners.items() if r.auto_priority is not None]
    return [name for _, name in sorted(ranked)]
