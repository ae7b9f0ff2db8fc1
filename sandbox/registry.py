"""The runner registry: every runner is an entry point of ``dsh_sandbox.runners``.

Built-in runners are registered there by this package's own metadata, exactly
like a third-party plugin, so no runner name is written anywhere else.

Reading entry points through ``importlib.metadata`` costs over 100 ms of
imports (email, zipfile, csv...) before a single file is read, which
``dsh-sandbox run`` cannot afford: ``entry_points_of`` reads the
``entry_points.txt`` of each ``*.dist-info`` / ``*.egg-info`` directory on
``sys.path`` directly, once per process.  Like ``importlib.metadata``, the first
distribution of a name on the path wins.  Zip archives on the path are not
searched (no runner is installed that way).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

RUNNER_GROUP = "dsh_sandbox.runners"

_DIST_SUFFIXES = (".dist-info", ".egg-info")


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


def _dist_name(dirname: str) -> str:
    stem = dirname.rsplit(".", 1)[0]
    return re.sub(r"[-_.]+", "-", stem.split("-")[0]).lower()


def _section(text: str, group: str) -> Iterable[tuple[str, str]]:
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current == group and "=" in line:
            name, _, value = line.partition("=")
            yield name.strip(), value.strip()


def scan_entry_points(group: str, path: Iterable[str]) -> tuple[EntryPoint, ...]:
    """The entry points of ``group`` declared by the distributions on ``path``."""
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in path:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if n.endswith(_DIST_SUFFIXES))
        except OSError:
            continue  # a file (zip) or a missing directory
        for dirname in names:
            dist = _dist_name(dirname)
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(entry or ".", dirname, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            found += [EntryPoint(name, value, group, dist) for name, value in _section(text, group)]
    return tuple(found)


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
