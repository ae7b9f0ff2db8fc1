"""E2B runner: commands run in a remote E2B sandbox; see ``runner`` for what holds."""

from dsh.runners.e2b.runner import E2BRunner

__all__ = ["E2BRunner"]
