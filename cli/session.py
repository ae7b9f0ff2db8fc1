"""How the commands open a session: ``build_session`` with the registry's lookup.

Providers, built-in or third-party, are found the same way: by name, through
the ``dsh_sandbox.plugins`` entry points, read by the registry's fast reader.
"""

from __future__ import annotations

from dsh.sandbox.context import Context, Service, load_plugin
from dsh.sandbox.session import SessionSpec, build_session


def load_provider(name: str) -> type[Service]:
    """The provider class registered as ``name``."""
    return load_plugin(name)


def open_session(spec: SessionSpec) -> Context:
    """``build_session`` as every command calls it."""
    return build_session(spec, load=load_provider)
