"""Where a policy's roots and named paths come from, each resolved by one walk.

``PinStore.walk`` resolves a path refusing a symlink on the way that a
sandboxed command could have planted (whatever the roots of the run that
planted it were, unless it lies in a system directory), and ends holding the
directory it checked; the functions here only say which paths are walked,
from where, and under which label an error names them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.pins import Pin, PinStore, Resolved
from dsh.sandbox.policy_paths import expand
from dsh.sandbox.private_tmp import SHARED
from dsh.sandbox.profiles import Profile
from dsh.sandbox.root_checks import add_root, refuse_non_directory


def flag_root(pins: PinStore, raw: str) -> Resolved:
    """A ``--writable`` directory, relative to the cwd as a shell user means it."""
    expanded = expand(raw)
    if expanded is None:
        raise ConfigError(f"--writable {raw}: names an unset environment variable; set it or pass the directory itself")
    resolved = pins.walk(f"--writable {raw}", raw, Path.cwd() / expanded)
    refuse_non_directory(f"--writable {raw}", resolved)
    return resolved


def gather_roots(pins: PinStore, profile: Profile, workspace: Resolved, home: Path | None,
                 flags: Iterable[str]) -> tuple[list[tuple[str, Resolved]], list[Path]]:
    """The workspace, the profile's roots, the sandbox HOME, the ``--writable``
    roots, and ``/tmp`` + ``$TMPDIR`` when shared, each with a label naming
    where it came from; and the missing ones (reported, never created)."""
    written: list[tuple[str, Resolved]] = [("workspace", workspace)]
    missing: list[Path] = []
    for raw in profile.writable_roots:
        expanded = expand(raw)
        if expanded is None:
            missing.append(Path(raw))  # an unset variable: reported, never guessed
            continue
        label = f"profile {profile.name}: writable_roots entry {raw!r}"
        # Relative to the workspace: from the directory held, not its name.
        resolved = pins.walk(label, raw, Path(expanded), base=workspace.pin)
        refuse_non_directory(label, resolved)
        add_root(written, missing, label, resolved)
    if home is not None:
        label = f"profile {profile.name}: home"
        add_root(written, missing, label, pins.walk(label, profile.home or str(home), home))
    for raw in flags:
        add_root(written, missing, f"--writable {raw}", flag_root(pins, raw))
    if not profile.exclude_tmp and profile.tmp == SHARED:
        for name, raw_tmp in (("/tmp", "/tmp"), ("$TMPDIR", os.environ.get("TMPDIR"))):
            if raw_tmp:
                label = f"{name} ({raw_tmp})"
                add_root(written, missing, label, pins.walk(label, raw_tmp, Path.cwd() / raw_tmp))
    return written, missing


def profile_paths(pins: PinStore, profile: Profile, key: str, raws: Iterable[str],
                  workspace: Pin) -> list[Resolved]:
    """The profile's ``key`` entries (read-only or hidden paths), relative to the workspace."""
    out: list[Resolved] = []
    for raw in raws:
        expanded = expand(raw)
        if expanded is None:
            # Failing closed: a path we cannot name cannot be hidden or kept read-only.
            raise ConfigError(f"profile {profile.name}: {key} entry {raw!r} names an unset "
                              "environment variable; set it or change the profile")
        label = f"profile {profile.name}: {key} entry {raw!r}"
        out.append(pins.walk(label, raw, Path(expanded), base=workspace))
    return out
