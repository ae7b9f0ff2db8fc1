"""dsh.sandbox: modes, policy, the runner contract, context and composition, the CLI."""

from dsh.sandbox.errors import (
    CompositionError,
    ConfigError,
    DshError,
    DuplicateServiceError,
    MissingServiceError,
    SandboxUnavailable,
)
from dsh.sandbox.modes import SandboxMode

__all__ = [
    "CompositionError",
    "ConfigError",
    "DshError",
    "DuplicateServiceError",
    "MissingServiceError",
    "SandboxMode",
    "SandboxUnavailable",
]
