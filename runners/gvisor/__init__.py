"""The gVisor runner: commands run on a user-space kernel (``runsc``), never the host's."""

from dsh.runners.gvisor.runner import GvisorRunner

__all__ = ["GvisorRunner"]
