"""Fixtures of the Landlock runner tests (defined in ``helpers``)."""

from tests.runners.landlock.helpers import layout, runner

__all__ = ["layout", "runner"]
