"""What a writable root may not be, for the policy service: a system directory,
dsh-sandbox's own state, a credential or start-up directory unless forced by
name, a file, or a path inside one that stays read-only or hidden.  Each
refusal names the root and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dsh.sandbox.errors import ConfigError, ConfigErrors
from dsh.sandbox.own_install import refuse_install_in_roots
from dsh.sandbox.own_state import state_refusal
from dsh.sandbox.pins import Resolved
from dsh.sandbox.policy_guard import root_refusal
from dsh.sandbox.policy_paths import is_within


def refuse_dangerous_roots(roots: Iterable[tuple[str, Path]], *, own_home: tuple[Path, ...],
                           forced: frozenset[Path]) -> None:
    """System directories are refused; credentials, start-up files and the
    home directory only unless forced by name."""
    roots = list(roots)
    # Every refused root is said at once: fixing them one run at a time is slow.
    errors: list[ConfigError] = []
    for label, path in roots:
        try:
            _refuse_one(label, path, own_home=own_home, forced=forced)
        except ConfigError as exc:
            errors.append(exc)
    if len(errors) > 1:
        raise ConfigErrors(tuple(errors))
    if errors:
        raise errors[0]
    refuse_install_in_roots(roots)


def _refuse_one(label: str, path: Path, *, own_home: tuple[Path, ...], forced: frozenset[Path]) -> None:
    reason, forceable = root_refusal(path)
    if reason is not None and not forceable:
        _refuse_root(label, path, reason, forceable=False)
    # dsh-sandbox's own state: no force lifts it (the run's own HOME excepted).
    state = state_refusal(path, own_home)
    if state is not None:
        also = f"{reason}; " if reason is not None else ""
        if label == "workspace":
            fix = "pass --workspace DIR naming a project directory, or use --mode read-only"
        elif label.startswith(("/tmp", "$TMPDIR")):
            fix = "drop tmp = \"shared\" from the profile"
        else:
            fix = "name a directory that does not overlap it"
        raise ConfigError(
            f"{label}: refusing to make {path} writable in workspace-write ({also}{state}: a command "
            f"could read other runs' output and HOMEs or write what a later run trusts); {fix}, or move "
            "that state (XDG_CACHE_HOME, XDG_CONFIG_HOME, XDG_RUNTIME_DIR, DSH_HOME) out of every "
            "writable root; --force-writable cannot lift this"
        )
    if reason is not None and path not in forced:
        _refuse_root(label, path, reason, forceable=True)


def _refuse_root(label: str, path: Path, reason: str, *, forceable: bool) -> None:
    force = (
        f"; or, if you mean it, force it with --force-writable {path} "
        "(or force_writable_roots in the profile)"
    )
    if label.startswith("$TMPDIR"):
        fix = 'drop tmp = "shared" from the profile or set TMPDIR to a private directory'
    elif label == "workspace":
        fix = "pass --workspace DIR naming a project directory, or use --mode read-only"
    elif forceable:
        fix = "name a project directory instead"
    else:
        fix = "name a project directory instead, or use --mode danger-full-access"
    raise ConfigError(
        f"{label}: refusing to make {path} writable in workspace-write ({reason}); "
        f"{fix}{force if forceable else ''}"
    )


def refuse_non_directory(label: str, resolved: Resolved) -> None:
    """A writable root that exists must be a directory; a missing one (from a
    flag or a profile alike) is reported in ``missing_roots`` and not writable
    until it exists: nothing is created for it."""
    if resolved.pin is not None and not resolved.pin.is_dir:
        raise ConfigError(f"{label}: {resolved.path} is not a directory; name a directory or drop it")


def add_root(written: list[tuple[str, Resolved]], missing: list[Path], label: str, resolved: Resolved) -> None:
    if resolved.pin is not None and resolved.pin.is_dir:
        written.append((label, resolved))
    else:
        missing.append(resolved.path)


def refuse_overlaps(roots: Iterable[tuple[str, Path]], rules: Iterable[tuple[str, Iterable[Path]]]) -> None:
    """A writable root inside a protected, read-only or hidden path is refused.

    Runners bind writable roots, so a root such as ``<ws>/.git/hooks`` would be
    bound writable over the read-only ``.git`` and defeat it.
    """
    rule_list = [(kind, list(paths)) for kind, paths in rules]
    for label, root in roots:
        for kind, paths in rule_list:
            for path in paths:
                if is_within(root, path):
                    raise ConfigError(
                        f"{label}: {root} is inside the {kind} path {path}, which stays "
                        f"{'unreadable' if kind == 'hidden' else 'read-only'}; drop this root "
                        "or use --mode danger-full-access"
                    )
