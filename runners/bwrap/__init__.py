"""bubblewrap runner: ``--ro-bind / /`` plus binds, namespaces and limits."""

from dsh.runners.bwrap.runner import BwrapRunner

__all__ = ["BwrapRunner"]
