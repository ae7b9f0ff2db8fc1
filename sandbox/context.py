"""Context, services and compositions: the capability-seam machinery.

A seam has three roles: a *service definition* (an abstract ``Service`` subclass
with a ``key``), *providers* (concrete subclasses found by name through the
``dsh_sandbox.plugins`` entry-point group) and *consumers* (code that calls
``ctx.require(Definition)`` and never names a provider).  One provider per key
per context.  A service lists the definitions it needs in ``requires``; a
composition is mounted in that dependency order, and a definition marked
``auto_mount`` is mounted with its default config when something needs it and
no entry provides it (so the smallest composition is just an executor).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from dsh.sandbox.config_check import build_config
from dsh.sandbox.errors import CompositionError, DuplicateServiceError, MissingServiceError
from dsh.sandbox.registry import EntryPoint

PLUGIN_GROUP = "dsh_sandbox.plugins"


@dataclasses.dataclass(frozen=True)
class NoConfig:
    """Config of a provider that takes none."""


class Service:
    """Base of every service definition.  Subclasses set ``key`` and ``Config``.

    ``Config`` is a frozen dataclass; composition entries are validated against
    its fields.  ``close()`` tears the provider down (kill and wait for what it
    started); it must be idempotent.
    """

    key: ClassVar[str]
    plugin_name: ClassVar[str] = ""
    Config: ClassVar[type[Any]] = NoConfig
    #: The service definitions this one looks up; they are mounted before it.
    requires: ClassVar[tuple[type[Service], ...]] = ()
    #: True: mounted with its default config when a mounted service requires
    #: it and no provider of its key is named.  Only for services whose
    #: default is safe whatever the session (never a policy or a runner).
    auto_mount: ClassVar[bool] = False

    def __init__(self, ctx: Context, config: Any = None) -> None:
        self.ctx = ctx
        self.config = config if config is not None else self.Config()

    def close(self) -> None:
        """Release what the provider holds.  Default: nothing."""


class Context:
    """Holds the mounted services, one provider per key.

    Consumers look a service up by its definition: ``ctx.require(SandboxHost)``
    (or ``ctx.get``, None when absent).  A key such as ``sandbox`` names the
    slot in messages and compositions; it is not an attribute of the context.
    """

    def __init__(self) -> None:
        self._services: dict[str, Service] = {}
        self._origin: dict[str, str] = {}
        #: The real path of the composition file this context was built from, if any.
        self.composition_file: str | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- mounting ---------------------------------------------------------
    def provide(self, service: Service, *, origin: str | None = None) -> Service:
        key = service.key
        name = origin or service.plugin_name or type(service).__name__
        with self._lock:
            if key in self._services:
                raise DuplicateServiceError(
                    f"duplicate service ctx.{key}: {self._origin[key]!r} is already mounted, "
                    f"{name!r} cannot be mounted too (one provider per key)"
                )
            self._services[key] = service
            self._origin[key] = name
        return service

    # -- access -----------------------------------------------------------
    def has(self, definition: type[Service]) -> bool:
        return self.get(definition) is not None

    def get(self, definition: type[S]) -> S | None:
        """The provider of ``definition``'s key, or None when none is mounted.

        A provider of that key that is not a ``definition`` is an error, not
        None: the composition mounted something else under the same key."""
        service = self._services.get(definition.key)
        if service is None or isinstance(service, definition):
            return service
        raise MissingServiceError(
            f"ctx.{definition.key} is {self._origin[definition.key]!r} "
            f"({type(service).__name__}), not a {definition.__name__}; mount a "
            f"{definition.__name__} provider for it"
        )

    def require(self, definition: type[S]) -> S:
        service = self.get(definition)
        if service is None:
            raise MissingServiceError(
                f"ctx.{definition.key} ({definition.__name__}) is not mounted; "
                "add a provider for it to the composition"
            )
        return service

    def services(self) -> dict[str, Service]:
        return dict(self._services)

    # -- teardown ---------------------------------------------------------
    def close(self) -> None:
        """Tear down every provider, last mounted first (consumers before their services)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            services = list(self._services.values())
        errors: list[BaseException] = []
        for service in reversed(services):
            try:
                service.close()
            except BaseException as exc:  # keep tearing down the rest
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


S = TypeVar("S", bound=Service)


# -- plugin lookup --------------------------------------------------------------
def _entry_points(group: str) -> Mapping[str, EntryPoint]:
    # The registry's reader, not importlib.metadata: its imports alone cost more
    # than the rest of `dsh-sandbox run -- true`.
    from dsh.sandbox.registry import entry_points_of

    return entry_points_of(group)


def plugin_names(group: str = PLUGIN_GROUP) -> list[str]:
    return sorted(_entry_points(group))


def load_entry_point(group: str, name: str, *, what: str, entry_id: str | None = None) -> Any:
    eps = _entry_points(group)
    where = f"entry {entry_id!r}: " if entry_id else ""
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise CompositionError(f"{where}unknown {what} {name!r}; known: {known}")
    return eps[name].load()


def load_plugin(name: str, *, entry_id: str | None = None) -> type[Service]:
    cls = load_entry_point(PLUGIN_GROUP, name, what="provider", entry_id=entry_id)
    if not (isinstance(cls, type) and issubclass(cls, Service)):
        raise CompositionError(f"provider {name!r} does not name a Service subclass")
    if not cls.plugin_name:
        cls.plugin_name = name
    return cls


# -- compositions ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CompositionEntry:
    id: str
    name: str
    config: Mapping[str, Any]


def parse_composition(data: Any, *, source: str = "composition") -> list[CompositionEntry]:
    """Accept a list of ``{id, name, config}`` (or a TOML table with ``plugins = [...]``)."""
    if isinstance(data, Mapping) and "plugins" in data:
        data = data["plugins"]
    if not isinstance(data, list):
        raise CompositionError(f"{source}: expected a list of {{id, name, config}} entries")
    entries: list[CompositionEntry] = []
    seen: set[str] = set()
    for index, raw in enumerate(data):
        label = f"{source}: entry #{index + 1}"
        if not isinstance(raw, Mapping):
            raise CompositionError(f"{label}: expected a mapping with id, name, config")
        extra = set(raw) - {"id", "name", "config"}
        if extra:
            raise CompositionError(f"{label}: unknown key(s) {sorted(extra)}; allowed: id, name, config")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise CompositionError(f"{label}: 'name' (the provider) is required")
        entry_id = raw.get("id", name)
        if not isinstance(entry_id, str) or not entry_id:
            raise CompositionError(f"{label}: 'id' must be a non-empty string")
        if entry_id in seen:
            raise CompositionError(f"{label}: duplicate id {entry_id!r}")
        seen.add(entry_id)
        config = raw.get("config") or {}
        if not isinstance(config, Mapping):
            raise CompositionError(f"entry {entry_id!r}: 'config' must be a mapping")
        entries.append(CompositionEntry(entry_id, name, dict(config)))
    return entries


def load_composition_file(path: str | Path) -> list[CompositionEntry]:
    return _load_composition(path)[0]


def _load_composition(path: str | Path) -> tuple[list[CompositionEntry], str]:
    """The entries of a composition file and the real path of the file read."""
    from dsh.sandbox.input_files import InputFileError, read_input_file

    p = Path(path)
    try:
        read = read_input_file(str(p))
        text = read.text
    except InputFileError as exc:
        raise CompositionError(f"composition {str(p)!r}: cannot read: {exc.problem}; {exc.fix}") from None
    try:
        if p.suffix == ".toml":
            import tomllib

            data: Any = tomllib.loads(text)
        else:
            import yaml  # lazily: only compositions need it

            data = yaml.safe_load(text)
    except Exception as exc:
        raise CompositionError(f"composition {str(p)!r}: not valid {p.suffix or 'YAML'}: {exc}") from None
    return parse_composition(data, source=str(p)), read.real


Loader = Callable[[str], type[Service]]


def build_context(
    entries: Iterable[CompositionEntry | Mapping[str, Any]] | str | Path,
    *,
    load: Loader | None = None,
) -> Context:
    """Build a context from a composition (entries, or a YAML/TOML file path).

    ``load`` finds a provider class by name (default: the entry points)."""
    source: str | None = None
    if isinstance(entries, (str, Path)):
        parsed, source = _load_composition(entries)
    else:
        items = list(entries)
        parsed = [e for e in items if isinstance(e, CompositionEntry)]
        raw = [e for e in items if not isinstance(e, CompositionEntry)]
        if raw:
            parsed = parse_composition(raw) if not parsed else parsed + parse_composition(raw)
    planned: list[Planned] = []
    for entry in parsed:
        cls = load(entry.name) if load is not None else load_plugin(entry.name, entry_id=entry.id)
        config = build_config(cls.Config, entry.config, entry=entry.id, provider=cls.plugin_name or cls.__name__)
        planned.append(Planned(cls, config, entry.id))
    ctx = mount_all(planned)
    ctx.composition_file = source
    return ctx


@dataclasses.dataclass(frozen=True)
class Planned:
    """One provider to mount: its class, its validated config, its entry id."""

    cls: type[Service]
    config: Any
    origin: str


def mount_all(planned: Iterable[Planned]) -> Context:
    """Mount ``planned`` in dependency order (``requires``) into a new context.

    Raises ``CompositionError`` naming what is missing or circular before
    anything is built."""
    ctx = Context()
    try:
        for item in dependency_order(list(planned)):
            ctx.provide(item.cls(ctx, item.config), origin=item.origin)
    except BaseException:
        ctx.close()
        raise
    return ctx


def dependency_order(planned: list[Planned]) -> list[Planned]:
    """``planned`` plus auto-mounted requirements, each after what it requires."""
    by_key: dict[str, Planned] = {}
    for item in planned:
        if item.cls.key in by_key:
            raise DuplicateServiceError(
                f"duplicate service ctx.{item.cls.key}: {by_key[item.cls.key].origin!r} and "
                f"{item.origin!r} both provide it (one provider per key)"
            )
        by_key[item.cls.key] = item
    ordered: list[Planned] = []
    done: set[str] = set()

    def visit(item: Planned, path: tuple[str, ...]) -> None:
        key = item.cls.key
        if key in done:
            return
        if key in path:
            cycle = " -> ".join((*path[path.index(key):], key))
            raise CompositionError(f"entry {item.origin!r}: circular requirement: {cycle}")
        for needed in item.cls.requires:
            dep = by_key.get(needed.key)
            if dep is None:
                if not needed.auto_mount:
                    raise CompositionError(
                        f"entry {item.origin!r}: {item.cls.__name__} requires ctx.{needed.key} "
                        f"({needed.__name__}) but no entry provides it; add a provider of "
                        f"{needed.__name__} to the composition"
                    )
                dep = by_key[needed.key] = Planned(needed, needed.Config(), needed.plugin_name or needed.key)
            elif not issubclass(dep.cls, needed):
                raise CompositionError(
                    f"entry {item.origin!r}: {item.cls.__name__} requires ctx.{needed.key} to be a "
                    f"{needed.__name__}, but entry {dep.origin!r} mounts {dep.cls.__name__}"
                )
            visit(dep, (*path, key))
        done.add(key)
        ordered.append(item)

    for item in planned:
        visit(item, ())
    return ordered
