"""Fixtures of the bwrap runner tests (defined in ``helpers``)."""

from tests.runners.bwrap.helpers import layout, runner

__all__ = ["layout", "runner"]
