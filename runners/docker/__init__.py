"""The docker runner: one warm container per session, one exec per command.

Importing this package does not import the ``docker`` SDK (it is loaded when a
container is needed), so listing runners or running others stays fast.
"""

from __future__ import annotations

from dsh.runners.docker.prune import prune_containers
from dsh.runners.docker.runner import DockerRunner

__all__ = ["DockerRunner", "prune_containers"]
