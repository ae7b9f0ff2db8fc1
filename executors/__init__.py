"""Shell executors, the subprocess service, output retention and shell-env.

Public names are re-exported lazily, so importing the seam vocabulary (or
``dsh-sandbox --help``) does not load the execution machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TextRetainer": "retention",
    "ItemRetainer": "retention",
    "Omitted": "retention",
    "format_retention_notice": "retention",
    "LocalSubprocessService": "process",
    "scrub_environ": "process",
    "layer_env": "process",
    "SENSITIVE_ENV_PATTERN": "process",
    "DSH_ENV_PREFIX": "process",
    "LocalShellExecution": "execution",
    "LocalBashExecutor": "local",
    "LocalPwshExecutor": "local",
    "LocalShellConfig": "local",
    "ShellEnvRegistry": "shell_env",
    "ShellEnvHandle": "shell_env",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dsh.executors' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dsh.executors.{module}"), name)
