"""dsh.sandbox: modes, policy, profiles, the runner contract, context, approval and errors."""

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
