"""The host's enabled apt sources, as mmdebstrap MIRROR arguments.

Building the workload image from the host's own apt configuration keeps a
user's mirror, local cache or proxy-friendly URIs, and names no package host
in this code.  Only what describes the chosen release is taken: binary
(``deb``) entries of that suite or its ``-updates``/``-security`` companions
that carry the ``main`` component.  Third-party repositories (another suite
name, or no ``main``) and disabled entries stay out of the image.

Parsing is pure (text in, values out); ``read_apt_sources`` is the one reader
of the live files.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: deb822 option fields and the names the one-line format gives them.
_ONE_LINE_OPTION = {"architectures": "arch", "languages": "lang", "targets": "target"}
#: deb822 fields that are the entry itself, not one of its options.
_ENTRY_FIELDS = {"types", "uris", "suites", "components", "enabled"}


@dataclass(frozen=True)
class AptEntry:
    """One source (a one-line entry, or one URI x suite of a deb822 stanza)."""

    kind: str  # "deb" or "deb-src"
    uri: str
    suite: str
    components: tuple[str, ...]
    options: tuple[tuple[str, str], ...] = ()

    def one_line(self) -> str:
        opts = " ".join(f"{k}={v}" for k, v in self.options)
        return " ".join([self.kind, *([f"[{opts}]"] if opts else []), self.uri, self.suite, *self.components])


@dataclass(frozen=True)
class AptSources:
    """A snapshot of the host's apt sources and the release it runs."""

    host_suite: str | None
    entries: tuple[AptEntry, ...] = ()

    def entries_for(self, suite: str) -> tuple[str, ...]:
        """The host's entries for ``suite`` as one-line sources; none unless the host runs it."""
        if not suite or self.host_suite != suite:
            return ()
        wanted = {suite, f"{suite}-updates", f"{suite}-security", f"{suite}/updates"}
        lines = (e.one_line() for e in self.entries
                 if e.kind == "deb" and e.suite in wanted and "main" in e.components)
        return tuple(dict.fromkeys(lines))


def parse_one_line(text: str) -> list[AptEntry]:
    """``sources.list`` format: ``deb [opt=value ...] URI SUITE COMPONENT...``; ``#`` comments."""
    entries = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options: list[tuple[str, str]] = []
        match = re.match(r"^(\S+)\s+\[([^\]]*)\]\s*(.*)$", line)
        if match:
            kind, inside, rest = match.groups()
            for item in inside.split():
                key, _, value = item.partition("=")
                options.append((key, value))
            words = [kind, *rest.split()]
        else:
            words = line.split()
        if len(words) < 3 or words[0] not in ("deb", "deb-src"):
            continue
        kind, uri, suite, *components = words
        entries.append(AptEntry(kind, uri, suite, tuple(components), tuple(options)))
    return entries


def _stanzas(text: str) -> Iterable[dict[str, str]]:
    fields: dict[str, str] = {}
    key = None
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif raw[0] in " \t" and key is not None:
            fields[key] += "\n" + raw.strip()
        elif ":" in raw:
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
    return


def parse_deb822(text: str) -> list[AptEntry]:
    """``.sources`` format: stanzas of ``Types``, ``URIs``, ``Suites``, ``Components``.

    A stanza with ``Enabled: no`` is skipped, and so is one whose options cannot
    be written on one line (a key embedded in ``Signed-By``).
    """
    entries = []
    for fields in _stanzas(text):
        if fields.get("enabled", "yes").lower() in ("no", "false", "0"):
            continue
        options = []
        for key, value in fields.items():
            if key in _ENTRY_FIELDS:
                continue
            if "\n" in value:
                break  # an embedded key: not expressible as a one-line source
            options.append((_ONE_LINE_OPTION.get(key, key), ",".join(value.split())))
        else:
            components = tuple(fields.get("components", "").split())
            for kind in fields.get("types", "").split():
                for uri in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split():
                        entries.append(AptEntry(kind, uri, suite, components, tuple(options)))
    return entries


def _codename(os_release: str) -> str | None:
    fields = dict(line.split("=", 1) for line in os_release.splitlines() if "=" in line)
    return fields.get("VERSION_CODENAME", "").strip().strip('"') or None


def read_apt_sources(root: Path = Path("/")) -> AptSources:
    """The live snapshot: ``/etc/os-release`` and the enabled apt source files under ``root``."""
    release = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        release = _codename((root / "etc/os-release").read_text(encoding="utf-8"))
    apt = root / "etc/apt"
    files = [apt / "sources.list"]
    with contextlib.suppress(OSError):
        files += sorted(p for p in (apt / "sources.list.d").iterdir() if p.suffix in (".list", ".sources"))
    entries: list[AptEntry] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        entries += parse_deb822(text) if path.suffix == ".sources" else parse_one_line(text)
    return AptSources(release, tuple(entries))
