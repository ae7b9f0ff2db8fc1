"""dsh.sandbox: modes, policy, profiles, the runner contract, context, approval and errors.

The names below are loaded when first asked for: importing one submodule
(the command line's ``--help`` reads entry points before importing anything
else) must not import the others.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
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

_MODULE_OF = {name: "errors" for name in __all__ if name != "SandboxMode"} | {"SandboxMode": "modes"}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'dsh.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dsh.sandbox.{module}"), name)
