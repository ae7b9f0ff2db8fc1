"""The docker runner: one warm container per session, one exec per command.

Importing this package does not import the ``docker`` SDK (it is loaded when a
container is needed), nor the runner itself until it is asked for: the
``image`` command (``dsh-sandbox --help`` lists it) lives in this package too,
so listing runners, the top-level help or running others stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.runners.docker.prune import prune_containers
    from dsh.runners.docker.runner import DockerRunner

__all__ = ["DockerRunner", "prune_containers"]

_LAZY = {"DockerRunner": "dsh.runners.docker.runner", "prune_containers": "dsh.runners.docker.prune"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")  # a submodule: imported as usual
    return getattr(importlib.import_module(module), name)
