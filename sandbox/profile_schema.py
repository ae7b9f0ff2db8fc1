"""Validation of one profile file's TOML table, with line numbers and fixes.

``tomllib`` gives values but no positions, so a bad key's line is found by
scanning the text for the key inside its table (``find_key_line``).  Every
error is a ``ProfileError`` naming the file, the line, the key, what is wrong
and how to fix it.  The JSON Schema in ``profiles/schema.json`` describes the
same format for editors; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.input_files import path_problem, text_problem
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.numeric import (
    MAX_BYTES,
    MIN_MEMORY_BYTES,
    NumberError,
    byte_count,
    processes,
    seconds,
)
from dsh.sandbox.protected_scan import GIT_ACCESS
from dsh.sandbox.toml_lines import find_key_line
from dsh.sandbox.units import limit_range_problem

LIST_KEYS = (
    "writable_roots",
    "read_only_paths",
    "hidden_paths",
    "protected_names",
    "env_passthrough",
    "allowed_runners",
    "accept_degraded",
    "force_writable_roots",
)
TOP_KEYS = (
    "description",
    "mode",
    "extends",
    "exclude_tmp",
    "tmp",
    "network",
    "git",
    "home",
    "limits",
    *LIST_KEYS,
)
NETWORK_KEYS = ("mode", "allow", "deny", "allow_private_for")
#: Every key of ``[network]``: the mode, the host lists, and ``[[network.secrets]]``.
NETWORK_TABLE_KEYS = (*NETWORK_KEYS, "secrets")
NETWORK_MODES = ("off", "allowlist", "on")
LIMIT_KEYS = ("wall_time_s", "max_processes", "max_memory", "max_file_size")

# A name, or a prefix ending in ``*`` (the executor matches with fnmatch).
_ENV_NAME = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*\*?\Z")
_DEGRADED_NAME = LazyPattern(r"[a-z0-9][a-z0-9-]*\Z")
_SIZE = LazyPattern(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*\Z")
# Bare K/M/G and the IEC forms are binary (as ulimit and Docker read them);
# KB/MB/GB are decimal.
_SIZE_UNITS: Mapping[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}


class ProfileError(ConfigError):
    """A profile cannot be read or is invalid; says where, what and the fix."""

    code = "PROFILE_INVALID"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        key: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.key = key
        self.fix = fix
        #: Every problem found in the file (``profile validate`` lists them all).
        self.errors: tuple[ProfileError, ...] = (self,)


def known_runners() -> list[str]:
    """Runner names registered in the ``dsh_sandbox.runners`` entry-point group."""
    from dsh.sandbox.registry import runner_entry_points

    return sorted(runner_entry_points())


def known_degradations() -> dict[str, str]:
    """Every degradation name a registered runner declares -> that runner's name
    (for listings; checking one name imports only its runner)."""
    from dsh.sandbox.registry import RunnerLoadError, known_runner_names, load_runner_class

    names: dict[str, str] = {}
    for runner in known_runner_names():
        try:
            names.update(dict.fromkeys(load_runner_class(runner).DEGRADATION_NAMES, runner))
        except RunnerLoadError:
            continue
    return names


def suggest(word: str, choices: Collection[str]) -> str | None:
    import difflib  # only for a misspelled word

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def parse_size(value: object, field: str = "size", *, low: int = 1) -> int:
    """Bytes (at least ``low``) from an int or a string like ``"512MiB"``, ``"1G"``, ``"10 MB"``.

    Raises ``NumberError`` (a ``ConfigError``) naming ``field`` and the range.
    """
    if isinstance(value, str):
        m = _SIZE.match(value)
        if not (m and m.group(2).lower() in _SIZE_UNITS):
            raise NumberError(field, f"{value!r} is not a size; write bytes or e.g. \"512MiB\", \"1G\"")
        number = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
        # Checked as a float first: int() of an absurd float is exact but meaningless.
        return byte_count(field, int(number) if number <= MAX_BYTES else MAX_BYTES + 1, low=low)
    if isinstance(value, float):
        raise NumberError(field, f"must be a size (bytes or a string like \"512MiB\"), got {value!r}")
    return byte_count(field, value, low=low)


# -- validation ---------------------------------------------------------------------
class _Checker:
    """Validates one file's table; collects every problem (each with its line)
    and raises one ``ProfileError`` listing them all."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.errors: list[ProfileError] = []

    def fail(self, key: str, problem: str, fix: str, *, table: str | None = None) -> ProfileError:
        line = find_key_line(self.text, key, table)
        shown = f"{table}.{key}" if table else key
        where = f" at line {line}" if line else ""
        if problem.startswith("unknown key"):
            message = f"{self.source}: {problem}{where}; {fix}"
        else:
            message = f"{self.source}: key '{shown}'{where}: {problem}; {fix}"
        return ProfileError(message, path=self.source, line=line, key=shown, fix=fix)

    def unknown(self, key: str, known: Collection[str], table: str | None = None) -> ProfileError:
        close = suggest(key, known)
        fix = f"did you mean '{close}'?" if close else "known keys: " + ", ".join(sorted(known))
        return self.fail(key, f"unknown key '{key}'", fix, table=table)

    def check(self, data: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in data.items():
            try:
                if key not in TOP_KEYS:
                    raise self.unknown(key, TOP_KEYS)
                out[key] = self._value(key, value)
            except ProfileError as exc:
                self.errors.append(exc)
        if self.errors:
            raise combined(self.errors)
        return out

    def _value(self, key: str, value: Any) -> Any:
        if key in ("description", "extends"):
            if not isinstance(value, str) or (key == "extends" and not value.strip()):
                raise self.fail(
                    key, f"must be a non-empty string, got {value!r}", f'write {key} = "..."'
                )
            problem = text_problem(value) if key == "description" else path_problem(value)
            if problem is not None:
                raise self.fail(key, problem, f"fix the value of {key}")
            return value
        if key == "mode":
            return self._mode(value)
        if key == "git":
            if value not in GIT_ACCESS:
                raise self.fail(
                    key,
                    f"must be \"read-only\" or \"commit\", got {value!r}",
                    'write git = "read-only" (the default) or git = "commit" to let commands commit',
                )
            return value
        if key == "tmp":
            if value not in ("private", "shared"):
                raise self.fail(
                    key,
                    f"must be \"private\" or \"shared\", got {value!r}",
                    'write tmp = "private" (the default: a /tmp and $TMPDIR of the session\'s own) or '
                    'tmp = "shared" (the host\'s /tmp and $TMPDIR, searched at any depth)',
                )
            return value
        if key == "network" and isinstance(value, dict):
            return self._network(value)
        if key in ("exclude_tmp", "network"):
            if not isinstance(value, bool):
                fix = f"write {key} = true or {key} = false (no quotes)"
                if key == "network":
                    fix += ', or a [network] table with mode = "allowlist" and allow = ["host", ...]'
                raise self.fail(key, f"must be true or false, got {value!r}", fix)
            if key == "network":
                # One form for both spellings: extends merges tables.
                return {"mode": "on" if value else "off"}
            return value
        if key == "home":
            fix = ('write home = "per-workspace" (the default), home = "host" (the real, '
                   'read-only home) or home = "DIR" (an existing directory)')
            if not isinstance(value, str) or not value.strip():
                raise self.fail(key, f"must be a non-empty string, got {value!r}", fix)
            problem = path_problem(value)
            if problem is not None:
                raise self.fail(key, problem, fix)
            return value
        if key == "limits":
            return self._limits(value)
        return self._list(key, value)

    def _network(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """A ``[network]`` table: ``mode`` and, under ``"allowlist"``, the host lists."""
        from dsh.sandbox import net_rules

        out: dict[str, Any] = {}
        for key, item in value.items():
            if key not in NETWORK_TABLE_KEYS:
                self.errors.append(self.unknown(key, NETWORK_TABLE_KEYS, table="network"))
            elif key == "mode":
                if item not in NETWORK_MODES:
                    self.errors.append(self.fail(
                        key, f"must be one of {', '.join(map(repr, NETWORK_MODES))}, got {item!r}",
                        'write mode = "off" (no network), "allowlist" (only the hosts in allow) or "on"',
                        table="network"))
                    continue
                out[key] = item
            elif key == "secrets":
                from dsh.sandbox.net_secrets import secret_table_problems

                found = secret_table_problems(item)
                self.errors.extend(self.fail(key, problem, fix, table="network") for problem, fix in found)
                if not found:
                    out[key] = [dict(table) for table in item]
            elif not isinstance(item, list) or not all(isinstance(v, str) for v in item):
                self.errors.append(self.fail(key, f"must be a list of strings, got {item!r}",
                                             f'write {key} = ["pkgs.example.org", "*.example.com"]', table="network"))
            else:
                problems = []
                for entry in item:
                    try:
                        net_rules.normalised_entry(f"network.{key}", entry)
                    except ConfigError as exc:
                        problems.append(str(exc).removeprefix(f"network.{key}: "))
                self.errors.extend(self.fail(key, problem, "fix or remove the entry", table="network")
                                   for problem in problems)
                if not problems:
                    out[key] = list(item)
        lists = [key for key in NETWORK_TABLE_KEYS[1:] if key in value]
        if lists and value.get("mode") in ("off", "on"):
            self.errors.append(self.fail(
                lists[0], f"applies only with mode = \"allowlist\", and this table sets mode = {value['mode']!r}",
                'write mode = "allowlist", or remove the host lists', table="network"))
        return out

    def _mode(self, value: Any) -> str:
        modes = [m.value for m in SandboxMode]
        if isinstance(value, str) and value in modes:
            return value
        close = suggest(value, modes) if isinstance(value, str) else None
        fix = f"did you mean '{close}'?" if close else "use one of: " + ", ".join(modes)
        raise self.fail("mode", f"unknown sandbox mode {value!r}", fix)

    def _list(self, key: str, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(
                key, f"must be a list of strings, got {value!r}", f'write {key} = ["..."]'
            )
        check = _ITEM_CHECKS.get(key)
        problems = [problem for item in value if (problem := check(item) if check else None) is not None]
        if problems:
            self.errors.extend(self.fail(key, *problem) for problem in problems[1:])
            raise self.fail(key, *problems[0])
        return list(value)

    def _limits(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(
                "limits",
                f"must be a table, got {value!r}",
                "write a [limits] table with " + ", ".join(LIMIT_KEYS),
            )
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key not in LIMIT_KEYS:
                self.errors.append(self.unknown(key, LIMIT_KEYS, table="limits"))
                continue
            try:
                out[key] = _LIMIT_PARSERS[key](f"limits.{key}", item)
            except NumberError as exc:
                # A range is shown in units a person reads; other problems as they are.
                ranged = exc.problem.startswith("must be a") and " from " in exc.problem
                problem = (limit_range_problem(key, item) if ranged else None) or exc.problem
                self.errors.append(self.fail(key, problem, _LIMIT_FIXES[key], table="limits"))
        return out


def combined(errors: list[ProfileError]) -> ProfileError:
    """One error listing every problem, in file order; the first one's fields."""
    ordered = sorted(errors, key=lambda e: e.line or 0)
    if len(ordered) == 1:
        return ordered[0]
    first = ordered[0]
    message = f"{len(ordered)} problems:\n  " + "\n  ".join(str(e) for e in ordered)
    combined = ProfileError(message, path=first.path, line=first.line, key=first.key, fix=first.fix)
    combined.errors = tuple(ordered)
    return combined


def _path_item(item: str) -> tuple[str, str] | None:
    if not item.strip():
        return "empty path", "remove the empty entry"
    if "\0" in item:
        return "path contains a NUL byte", "remove the NUL byte"
    problem = path_problem(item)
    if problem is not None:
        return f"path {problem}", "shorten it"
    return None


def _name_item(item: str) -> tuple[str, str] | None:
    bad = _path_item(item)
    if bad:
        return bad
    if item.startswith(("/", "~", "$")) or ".." in item.split("/"):
        return (
            f"{item!r} is not a name relative to a writable root",
            "give a relative name such as '.env' or '.vscode' (no leading /, ~ or ..)",
        )
    return None


def _env_item(item: str) -> tuple[str, str] | None:
    if not _ENV_NAME.match(item):
        return (
            f"{item!r} is not an environment variable name",
            "use names like 'NODE_ENV', or a prefix like 'NPM_CONFIG_*'",
        )
    return None


def _runner_item(item: str) -> tuple[str, str] | None:
    known = known_runners()
    if item in known:
        return None
    close = suggest(item, known)
    hint = f"did you mean '{close}'? " if close else ""
    return f"unknown runner {item!r}", f"{hint}known runners: {', '.join(known)}"


def degradation_problem(item: str) -> tuple[str, str] | None:
    """(problem, fix) when the runner ``item`` is named after does not declare it.

    A degradation name starts with its runner's name, so only that runner is
    imported (``run`` loads it anyway); a runner whose code is not installed
    here is trusted by name, so a profile stays valid on machines without it.
    """
    from dsh.sandbox.gate import HOST_DEGRADATIONS
    from dsh.sandbox.registry import RunnerLoadError, known_runner_names, load_runner_class

    if item in HOST_DEGRADATIONS:
        return None

    def owned(names: Collection[str]) -> list[str]:
        return [name for name in names if item.startswith(f"{name}-")]

    if _DEGRADED_NAME.match(item):
        for owner in owned(known_runner_names()):
            try:
                declared = load_runner_class(owner).DEGRADATION_NAMES
            except RunnerLoadError:
                return None
            if item in declared:
                return None
            close = suggest(item, declared)
            hint = f"did you mean '{close}'? " if close else ""
            return (
                f"{item!r} is not a degradation the {owner} runner reports",
                f"{hint}its names: {', '.join(declared) or 'none'} (see dsh-sandbox runners)",
            )
    prefixes = ", ".join(f"{name}-..." for name in known_runner_names())
    return (
        f"{item!r} is not a degradation any registered runner reports",
        f"a degradation name starts with its runner's name ({prefixes}); see dsh-sandbox runners",
    )


_ITEM_CHECKS: Mapping[str, Callable[[str], tuple[str, str] | None]] = {
    "writable_roots": _path_item,
    "read_only_paths": _path_item,
    "hidden_paths": _path_item,
    "protected_names": _name_item,
    "env_passthrough": _env_item,
    "allowed_runners": _runner_item,
    "accept_degraded": degradation_problem,
    "force_writable_roots": _path_item,
}


_LIMIT_PARSERS: Mapping[str, Callable[[str, object], Any]] = {
    "wall_time_s": seconds,
    "max_processes": processes,
    "max_memory": lambda field, value: parse_size(value, field, low=MIN_MEMORY_BYTES),
    "max_file_size": lambda field, value: parse_size(value, field),
}
_LIMIT_FIXES: Mapping[str, str] = {
    "wall_time_s": "write wall_time_s = 300 (seconds)",
    "max_processes": "write max_processes = 256",
    "max_memory": 'write bytes as an integer or a string like "512MiB" or "1G" (at least "16MiB")',
    "max_file_size": 'write bytes as an integer or a string like "100MiB" or "1G"',
}


def check_profile_table(data: Mapping[str, Any], text: str, source: str) -> dict[str, Any]:
    """Validate one file's parsed table; returns it with limits parsed to numbers."""
    return _Checker(text, source).check(data)
