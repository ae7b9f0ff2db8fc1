"""Profiles: named refinements of a sandbox mode, written in TOML.

A profile is found by name (the built-ins shipped in ``dsh.profiles``) or by
path (``--profile ./my.toml``).  ``extends`` inherits from another profile (a
built-in name, or a path relative to the extending file).  Inheritance rules:

- scalars (``mode``, ``exclude_tmp``, ``tmp``, ``git``, ``home``), each ``limits`` key and
  ``network``'s mode (``network = true`` is ``mode = "on"``): the child's value wins when it sets one;
- ``network``'s host lists (``allow``, ``deny``, ``allow_private_for``): the union; a child that
  sets the mode to ``"off"`` or ``"on"`` drops the inherited ones, and hosts listed under an
  inherited mode other than ``"allowlist"`` are refused; ``[[network.secrets]]`` the same way,
  one entry per variable (a child's entry for an inherited variable replaces it);
- ``allowed_runners``: the child's list replaces the parent's when set;
- every other list (roots, read-only, hidden, protected names, env
  passthrough, accepted degradations) is the union, parent first, so a child
  can only add to what it inherits;
- ``description`` is not inherited.

Paths stay as written (``~`` and ``$VAR`` are expanded by the policy service
when it resolves a policy; relative paths are relative to the workspace).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.input_files import InputFileError, path_problem, read_input_file
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.profile_schema import (
    LIST_KEYS,
    NETWORK_KEYS,
    NETWORK_TABLE_KEYS,
    ProfileError,
    check_profile_table,
    combined,
    known_runners,
    parse_size,
    suggest,
)
from dsh.sandbox.toml_lines import find_key_line

if TYPE_CHECKING:
    from dsh.sandbox.net_rules import NetworkRules

__all__ = [
    "Profile",
    "ProfileError",
    "builtin_profile_names",
    "known_runners",
    "list_profiles",
    "load_profile",
    "parse_size",
    "user_profile_dir",
    "validate_profile_file",
]

PROFILE_PACKAGE = "dsh.profiles"
_REPLACED_LISTS = ("allowed_runners",)


@dataclass(frozen=True)
class Profile:
    """One profile with its ``extends`` chain already merged in."""

    name: str
    source: str  # the file it was read from
    builtin: bool = False
    description: str = ""
    mode: SandboxMode | None = None  # None: the policy service's default mode
    extends: str | None = None
    chain: tuple[str, ...] = ()  # this profile, then each ancestor, by name
    writable_roots: tuple[str, ...] = ()
    read_only_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    protected_names: tuple[str, ...] = ()
    exclude_tmp: bool = False
    tmp: str | None = None  # None: "private" (see private_tmp)
    git: str | None = None  # None: "read-only"
    home: str | None = None  # None: "per-workspace" (see sandbox_home)
    network: bool | None = None  # None: the mode's default; False under an allowlist
    network_allowlist: NetworkRules | None = None  # [network] mode = "allowlist"
    env_passthrough: tuple[str, ...] = ()
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    allowed_runners: tuple[str, ...] = ()  # empty: any runner
    accept_degraded: tuple[str, ...] = ()
    force_writable_roots: tuple[str, ...] = ()  # dangerous roots accepted by name
    sources: tuple[str, ...] = ()  # real paths of the files read: this one, then each non-built-in ancestor

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (for ``profile show --json``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, SandboxMode):
                value = value.value
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # limits, network rules
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(value).items()}
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


# -- finding files -------------------------------------------------------------------
def _builtin_dir() -> Path:
    # The profiles ship as plain files in the package (editable or wheel
    # install), a regular package: its directory is where its __init__ is
    # (importlib.resources would cost every run tempfile's and random's imports).
    import importlib

    init = importlib.import_module(PROFILE_PACKAGE).__file__
    assert init is not None, f"{PROFILE_PACKAGE} is a regular package"
    return Path(init).parent


def _is_builtin_file(path: Path) -> bool:
    # Compared file by file, not by parent directory: a strict editable install
    # ships the package as a real directory of links to the checkout's files.
    shipped = _builtin_dir() / path.name
    return shipped.is_file() and os.path.realpath(path) == os.path.realpath(shipped)


def builtin_profile_names() -> list[str]:
    return sorted(p.stem for p in _builtin_dir().glob("*.toml"))


def _looks_like_path(name_or_path: str) -> bool:
    return os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith(".toml")


def user_profile_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``--profile NAME`` finds the user's own profiles:
    ``$XDG_CONFIG_HOME/dsh-sandbox/profiles`` (default ``~/.config/...``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    # A relative XDG_CONFIG_HOME is invalid by the spec: ignored.
    root = Path(base) if os.path.isabs(base) else Path(os.path.expanduser("~")) / ".config"
    if not root.is_absolute():
        # Relative to the cwd, the workspace's own files would be read as the user's.
        raise ProfileError(f"HOME={env.get('HOME', '')!r} is not an absolute path, so your profiles directory "
                           "cannot be found safely; set HOME to your home directory, or XDG_CONFIG_HOME to an "
                           "absolute path", key="profile",
                           fix="set HOME to your home directory, or XDG_CONFIG_HOME to an absolute path")
    return root / "dsh-sandbox" / "profiles"


def _locate(name_or_path: str, *, relative_to: Path | None = None) -> tuple[Path, bool]:
    """The file a profile reference names, and whether it is a built-in.

    A name is a built-in, or the user's ``NAME.toml`` in ``user_profile_dir()``;
    a user file with a built-in's name is refused rather than shadowing it (or
    being shadowed) without a word."""
    if not name_or_path.strip():
        raise ProfileError(
            "profile: empty name; give a built-in name or a path to a .toml file",
            key="profile",
            fix="give a built-in name or a path",
        )
    problem = path_problem(name_or_path)
    if problem is not None:
        fix = "give a built-in name, a name from your profiles directory or a path to a .toml file"
        raise ProfileError(f"profile: {name_or_path[:40]!r}...: {problem}; {fix}", key="profile", fix=fix)
    if _looks_like_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        return path, False
    builtin = _builtin_dir() / f"{name_or_path}.toml"
    try:
        mine = user_profile_dir() / f"{name_or_path}.toml"
    except ProfileError:
        if builtin.is_file():
            return builtin, True  # no directory of the user's to clash with
        raise
    try:
        has_mine = os.path.lexists(mine)
    except (OSError, ValueError):
        has_mine = False
    if builtin.is_file():
        if has_mine:
            fix = f"rename {mine} (and use --profile NEWNAME), or pass its path to use it"
            raise ProfileError(
                f"profile '{name_or_path}': both a built-in profile and your {mine} have this name, and "
                f"neither may silently replace the other; {fix}",
                key="profile", fix=fix,
            )
        return builtin, True
    if has_mine:
        return mine, False
    names = builtin_profile_names()
    close = suggest(name_or_path, names)
    hint = f"did you mean '{close}'? " if close else ""
    fix = (
        f"{hint}built-in profiles: {', '.join(names)}; your own go in {user_profile_dir()}/NAME.toml; "
        f"or pass a path such as ./{name_or_path}.toml"
    )
    raise ProfileError(f"unknown profile '{name_or_path}'; {fix}", key="profile", fix=fix)


def _read(path: Path) -> tuple[dict[str, Any], str, str]:
    """Parse and validate one file (without following ``extends``); also
    returns the real path of the file that was read."""
    source = str(path)
    try:
        read = read_input_file(source)
    except InputFileError as exc:
        fix = "check the path, or use a built-in name (dsh-sandbox profile list)" if exc.missing else exc.fix
        raise ProfileError(
            f"profile {source}: {exc.problem}; {fix}", path=source, fix=fix
        ) from None
    text = read.text
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        fix = "fix the TOML syntax (strings need quotes, lists need [ ])"
        raise ProfileError(
            f"profile {source}: invalid TOML: {exc}; {fix}", path=source, fix=fix
        ) from None
    try:
        return check_profile_table(data, text, source), text, read.real
    except ProfileError as exc:
        # An unknown parent is one more problem of this file: list it too.
        parent = data.get("extends")
        if not isinstance(parent, str) or any(e.key == "extends" for e in exc.errors):
            raise
        try:
            _parent_of(path, parent, text)
        except ProfileError as problem:
            raise combined([*exc.errors, problem]) from None
        raise


# -- merging -----------------------------------------------------------------------
def _merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    merged = {k: v for k, v in parent.items() if k != "description"}
    for key, value in child.items():
        if key in LIST_KEYS and key not in _REPLACED_LISTS:
            merged[key] = list(dict.fromkeys([*parent.get(key, []), *value]))
        elif key == "limits":
            merged[key] = {**parent.get("limits", {}), **value}
        elif key == "network":
            # The mode as a scalar, the host lists as the other lists: a child adds to
            # them.  A child that sets the mode to off or on drops the inherited hosts.
            mine = parent.get("network", {})
            if value.get("mode", "allowlist") != "allowlist":
                mine = {}
            merged[key] = {**mine, **value, **{
                name: list(dict.fromkeys([*mine.get(name, []), *value.get(name, [])]))
                for name in NETWORK_KEYS[1:] if name in mine or name in value
            }}
            if "secrets" in mine or "secrets" in value:
                # Added to as the lists are; a child's entry for an inherited
                # variable replaces the parent's (one entry per variable).
                envs = {table.get("env") for table in value.get("secrets", [])}
                merged[key]["secrets"] = [*(t for t in mine.get("secrets", []) if t.get("env") not in envs),
                                          *value.get("secrets", [])]
        else:
            merged[key] = value
    return merged


def _load_chain(
    path: Path, seen: tuple[str, ...]
) -> tuple[dict[str, Any], tuple[Path, ...], tuple[str, ...]]:
    """The merged table, the files of the chain, and the real path each was read from."""
    key = os.path.realpath(path)
    if key in seen:
        names = [Path(p).stem for p in (*seen, key)]
        fix = "remove one of the 'extends' keys so the chain ends"
        raise ProfileError(
            f"profile {path}: extends cycle: {' -> '.join(names)}; {fix}",
            path=str(path),
            key="extends",
            fix=fix,
        )
    data, text, real = _read(path)
    chain: tuple[Path, ...] = (path,)
    parent_ref = data.get("extends")
    if parent_ref is None:
        return data, chain, (real,)
    parent_path = _parent_of(path, parent_ref, text)
    parent, parent_chain, parent_real = _load_chain(parent_path, (*seen, key))
    return _merge(parent, data), chain + parent_chain, (real, *parent_real)


def _parent_of(path: Path, parent_ref: str, text: str) -> Path:
    """The file ``extends = parent_ref`` in ``path`` names; refused when there is none."""
    line = find_key_line(text, "extends")
    where = f" at line {line}" if line else ""
    try:
        parent_path, _builtin = _locate(parent_ref, relative_to=path.parent)
    except ProfileError as exc:  # an unknown built-in name: say which file asked for it
        raise ProfileError(
            f"profile {path}: extends{where}: {exc}", path=str(path), line=line, key="extends",
            fix=exc.fix,
        ) from None
    if not os.path.lexists(parent_path):
        fix = "fix the path (relative to this file) or use a built-in name"
        raise ProfileError(
            f"profile {path}: extends{where}: {parent_path} not found; {fix}",
            path=str(path), line=line, key="extends", fix=fix,
        )
    return parent_path


def _build(path: Path, builtin: bool) -> Profile:
    data, files, reals = _load_chain(path, ())
    chain = tuple(p.stem for p in files)
    # Built-ins ship with the package: a command that can rewrite them can
    # rewrite dsh itself, so only the user's own files are worth tracking.
    # Each by the real path of the file that was read (from its descriptor),
    # so the writable-root check judges what was read, not what the name
    # points at afterwards.
    sources = tuple(real for p, real in zip(files, reals, strict=True) if not _is_builtin_file(p))
    limits = data.get("limits", {})
    mode = data.get("mode")
    network, allowlist = _network(path, data.get("network"))
    return Profile(
        name=path.stem,
        source=str(path),
        builtin=builtin,
        description=data.get("description", ""),
        mode=SandboxMode(mode) if mode is not None else None,
        extends=data.get("extends"),
        chain=chain,
        sources=sources,
        exclude_tmp=data.get("exclude_tmp", False),
        tmp=data.get("tmp"),
        git=data.get("git"),
        home=data.get("home"),
        network=network,
        network_allowlist=allowlist,
        limits=ResourceLimits(
            wall_time_s=limits.get("wall_time_s"),
            max_processes=limits.get("max_processes"),
            max_memory_bytes=limits.get("max_memory"),
            max_file_size_bytes=limits.get("max_file_size"),
        ),
        **{key: tuple(data.get(key, ())) for key in LIST_KEYS},
    )


def _network(path: Path, table: Mapping[str, Any] | None) -> tuple[bool | None, NetworkRules | None]:
    """``network`` and ``network_allowlist`` from the merged ``[network]`` table."""
    if table is None:
        return None, None
    mode = table.get("mode")
    lists = [key for key in NETWORK_TABLE_KEYS[1:] if table.get(key)]
    if mode != "allowlist" and lists:
        # Hosts listed under a mode that ignores them: the run would get the whole
        # network (or none) while the file reads as an allowlist.
        fix = 'add mode = "allowlist" to the [network] table that lists hosts'
        got = "no profile of its chain sets its mode (the default is \"off\")" if mode is None else \
            f"the mode it inherits is {mode!r}"
        raise ProfileError(f"profile {path}: [network] lists {lists[0]} but {got}; {fix}", path=str(path),
                           key="network.mode", fix=fix)
    if mode != "allowlist":
        return (None if mode is None else mode == "on"), None
    # Imported only for a profile that limits the network by name.
    from dsh.sandbox.net_rules import parse as parse_rules

    try:
        rules = parse_rules(table.get("allow", ()), table.get("deny", ()), table.get("allow_private_for", ()))
        if table.get("secrets"):
            from dsh.sandbox.net_secrets import parse_secret

            rules = dataclasses.replace(rules, secrets=tuple(
                parse_secret(rules, entry.get("env"), entry.get("hosts"), entry.get("header", "Authorization"))
                for entry in table["secrets"]))
    except ConfigError as exc:
        raise ProfileError(f"profile {path}: {exc}", path=str(path), key="network", fix=str(exc)) from None
    return False, rules


# -- public API -----------------------------------------------------------------------
def load_profile(name_or_path: str | os.PathLike[str]) -> Profile:
    """A built-in profile by name, or a profile file by path, with ``extends`` merged.

    Raises ``ProfileError`` (code ``PROFILE_INVALID``) naming the file, line,
    key and fix.
    """
    path, builtin = _locate(os.fspath(name_or_path))
    return _build(path, builtin)


def validate_profile_file(path: str | os.PathLike[str]) -> Profile:
    """Validate the profile at ``path`` (always a path, never a built-in name)."""
    file = Path(os.fspath(path)).expanduser()
    return _build(file, _is_builtin_file(file))


def list_profiles() -> list[Profile]:
    """Every built-in profile, loaded (sorted by name)."""
    # By file, not by name: a user profile clashing with a name must not hide the built-in.
    return [_build(_builtin_dir() / f"{name}.toml", True) for name in builtin_profile_names()]
