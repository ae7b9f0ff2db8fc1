"""dsh-sandbox's own installation, kept out of every writable root.

The interpreter, ``sys.prefix`` and the base prefix, the ``site-packages``
directories and the ``dsh`` package's files (an editable install links into
``build/`` and from there to the sources: both count), and every other
directory on the import path.  A writable root holding any of them lets a
command drop a ``.pth`` or rewrite a module that the next ``dsh-sandbox``
start runs as the caller, outside any sandbox, so workspace-write refuses to
start.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.policy_paths import canonical, is_within

#: The fix for an installation inside a writable root.
INSTALL_FIX = (
    "install dsh-sandbox outside every writable root (e.g. `pipx install dsh-sandbox`, or a venv outside "
    "the project such as ~/.local/share/dsh-sandbox/venv) and run that one, or use --mode read-only"
)

#: An import directory of the running interpreter that is not its installation.
IMPORT_DIR = "a directory on dsh-sandbox's import path (sys.path)"
IMPORT_DIR_FIX = (
    "start dsh-sandbox so that no writable directory is on its import path: run the `dsh-sandbox` script "
    "(not `python -m dsh.cli` from the project, which puts the working directory there; `python -P -m "
    "dsh.cli` does not), and give PYTHONPATH only absolute directories outside the writable roots"
)
#: What a planted file does, and the fix: for the installation, and for another import directory.
_INSTALL_WORDS = ("a .pth file in site-packages runs at every start", INSTALL_FIX)
_IMPORT_DIR_WORDS = ("a module planted there, such as dsh/__init__.py or sitecustomize.py, is imported at "
                     "the next start", IMPORT_DIR_FIX)


@functools.cache
def install_paths() -> tuple[tuple[Path, str, bool], ...]:
    """Where this dsh-sandbox and its interpreter live (canonical): each path,
    what it is, and whether a root inside it counts too (not for a prefix
    such as /usr/local: only its Python directories are Python's).

    Cached: the installation does not move while the process runs, and the
    check runs at every workspace-write resolve.
    """
    found: list[tuple[Path, str, bool]] = [
        (canonical(sys.executable), "the Python interpreter running dsh-sandbox", False),
        (canonical(sys.prefix), "the Python environment (sys.prefix) of dsh-sandbox", False),
        (canonical(sys.base_prefix), "the Python installation (sys.base_prefix) of dsh-sandbox", False),
        (canonical(os.path.dirname(os.__file__)), "the standard library of dsh-sandbox's interpreter", True),
    ]
    if sys.prefix != sys.base_prefix:
        found.append((canonical(Path(sys.prefix) / "bin"), "the scripts of dsh-sandbox's environment", True))
    import site  # imported at start-up already: no cost

    sites = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE and site.USER_SITE:
        sites.append(site.USER_SITE)
    found += [(canonical(p), "site-packages of dsh-sandbox's interpreter (.pth files there run at every start)", True)
              for p in sites]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if os.path.isabs(entry):
            found.append((canonical(entry), "a PYTHONPATH entry of dsh-sandbox's interpreter", True))
    found += [(path, what, True) for path, what in _package_paths()]
    # Every other import directory: ``python -m`` puts the working directory
    # first, and so do a relative or empty PYTHONPATH entry (made absolute
    # against it).  A module planted there (``dsh/__init__.py``,
    # ``sitecustomize.py``) is what the next start imports; a missing one
    # (``PYTHONPATH=src``) could be made and filled.  Only a directory inside
    # a root counts: a root below one (``proj`` below the cwd) is a name
    # nothing imports.
    known = {path for path, _what, _inner in found}
    for entry in filter(_names_a_directory, sys.path):
        path = canonical(os.path.abspath(entry or os.curdir))
        if path not in known:
            found.append((path, IMPORT_DIR, False))
    return tuple(dict.fromkeys(found))


def _package_paths() -> list[tuple[Path, str]]:
    """The ``dsh`` package's directories, and where their files link to (an
    editable install links each source file from ``build/``)."""
    import dsh

    out: list[tuple[Path, str]] = []
    for entry in filter(_names_a_directory, getattr(dsh, "__path__", ())):
        top = Path(entry)
        out.append((canonical(top), "the dsh-sandbox package"))
        try:
            subpackages = [Path(e.path) for e in os.scandir(top) if e.is_dir() and not e.name.startswith("__")]
        except OSError:
            continue
        for sub in subpackages:
            init = sub / "__init__.py"
            if os.path.islink(init):
                out.append((canonical(init).parent, "the dsh-sandbox sources (linked by its editable install)"))
    return out


def _names_a_directory(entry: str) -> bool:
    """Is this import-path entry a directory (relative ones from the working
    directory), not a key a path hook claims, such as the
    ``__editable__.<project>.finder.__path_hook__`` of setuptools' default
    editable install, which names no file at all?"""
    import importlib.machinery

    finder = sys.path_importer_cache.get(entry)
    if finder is not None and not isinstance(finder, importlib.machinery.FileFinder):
        return False
    return os.path.isabs(entry) or not (entry.startswith("__editable__") and entry.endswith("__path_hook__"))


def refuse_install_in_roots(roots: Iterable[tuple[str, Path]]) -> None:
    """``ConfigError`` when dsh-sandbox's own installation lies in (or contains) a writable root."""
    paths = install_paths()
    for label, root in roots:
        for path, what, inner in paths:
            inside = is_within(path, root)
            if inside or (inner and is_within(root, path)):
                how, fix = _IMPORT_DIR_WORDS if what == IMPORT_DIR else _INSTALL_WORDS
                raise ConfigError(
                    f"{label}: refusing to make {root} writable in workspace-write: {path} ({what}) lies "
                    f"{'inside' if inside else 'around'} it, so a sandboxed command could change what the next "
                    f"dsh-sandbox start runs as you, outside any sandbox ({how}); {fix}"
                )
