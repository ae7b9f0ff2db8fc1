"""How the commands find providers: the built-in ones by direct import.

Scanning the installed distributions' entry points costs more than the rest
of ``dsh-sandbox run -- true`` together, so the providers this package ships
are found from this table (kept equal to the ``dsh_sandbox.plugins`` entry
points by a test); any other name goes through the entry points.
"""

from __future__ import annotations

import importlib

from dsh.sandbox.context import Context, Service, load_plugin
from dsh.sandbox.session import SessionSpec, build_session

#: provider name -> "module:class", as in pyproject.toml's entry points.
BUILTIN_PROVIDERS: dict[str, str] = {
    "subprocess-local": "dsh.executors.process:LocalSubprocessService",
    "shell-env": "dsh.executors.shell_env:ShellEnvRegistry",
    "bash-local": "dsh.executors.local:LocalBashExecutor",
    "pwsh-local": "dsh.executors.local:LocalPwshExecutor",
    "bash-sandbox": "dsh.executors.sandboxed:SandboxBashExecutor",
    "pwsh-sandbox": "dsh.executors.sandboxed:SandboxPwshExecutor",
    "sandbox-policy": "dsh.sandbox.policy_service:PolicyService",
    "sandbox": "dsh.sandbox.host:SandboxHost",
    "approval-deny": "dsh.sandbox.approval:DenyAllApproval",
    "approval-prompt": "dsh.sandbox.approval:PromptApproval",
    "approval-rules": "dsh.sandbox.approval_rules:RulesApproval",
    "jobs": "dsh.tools.jobs:JobRegistry",
}


def load_provider(name: str) -> type[Service]:
    """The provider class registered as ``name``."""
    target = BUILTIN_PROVIDERS.get(name)
    if target is None:
        return load_plugin(name)
    module, attr = target.split(":")
    cls: type[Service] = getattr(importlib.import_module(module), attr)
    return cls


def open_session(spec: SessionSpec) -> Context:
    """``build_session`` with the fast provider lookup every command uses."""
    return build_session(spec, load=load_provider)
