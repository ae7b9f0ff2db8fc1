"""The default protected names, as data: ``protected_names.json`` beside this module.

Each entry names a file or directory a later host action runs or trusts, the
tool that reads it (``source``) and what a writer gets from it (``runs``).
The file is read on first use (once per process), not at import.  JSON, not
TOML: it is read on every ``run``, and the C parser costs a tenth of a millisecond.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.errors import ConfigError


@dataclass(frozen=True)
class ProtectedName:
    name: str
    source: str  # the tool that reads it
    runs: str  # what a command that wrote it would get run or trusted


@functools.cache
def protected_name_entries() -> tuple[ProtectedName, ...]:
    """Every entry of the data file, checked: a name and both notes, no duplicate."""
    raw = json.loads(Path(__file__).with_name("protected_names.json").read_text("utf-8"))["names"]
    out: list[ProtectedName] = []
    for i, item in enumerate(raw):
        fields = {k: item.get(k) for k in ("name", "source", "runs")}
        bad = [k for k, v in fields.items() if not isinstance(v, str) or not v.strip()]
        if bad or set(item) - set(fields):
            raise ConfigError(f"protected_names.json entry {i + 1}: needs exactly name, source and runs "
                              f"(missing or empty: {', '.join(bad) or 'none'}; unknown: "
                              f"{', '.join(sorted(set(item) - set(fields))) or 'none'})")
        out.append(ProtectedName(str(fields["name"]), str(fields["source"]), str(fields["runs"])))
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ConfigError("protected_names.json: a name appears twice")
    return tuple(out)


@functools.cache
def default_protected_names() -> tuple[str, ...]:
    return tuple(e.name for e in protected_name_entries())
