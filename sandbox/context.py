"""Context, services and compositions: the capability-seam machinery.

A seam has three roles: a *service definition* (an abstract ``Service`` subclass
with a ``key``), *providers* (concrete subclasses found by name through the
``dsh_sandbox.plugins`` entry-point group) and *consumers* (code that reads
``ctx.<key>`` and never names a provider).  One provider per key per context.
"""

from __future__ import annotations

import dataclasses
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dsh.sandbox.errors import CompositionError, DuplicateServiceError, MissingServiceError

if TYPE_CHECKING:
    from importlib import metadata

PLUGIN_GROUP = "dsh_sandbox.plugins"

# Core services every composition gets when it does not name a provider for them,
# so the smallest composition is just an executor.
DEFAULT_PROVIDERS: Mapping[str, str] = {
    "subprocess": "subprocess-local",
    "shell_env": "shell-env",
}


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

    def __init__(self, ctx: Context, config: Any = None) -> None:
        self.ctx = ctx
        self.config = config if config is not None else self.Config()

    def close(self) -> None:
        """Release what the provider holds.  Default: nothing."""


class Context:
    """Holds the mounted services; ``ctx.<key>`` returns the provider."""

    def __init__(self) -> None:
        self._services: dict[str, Service] = {}
        self._origin: dict[str, str] = {}
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

    def mount(self, name: str, config: Mapping[str, Any] | None = None, *, entry_id: str | None = None) -> Service:
        """Build the provider registered as ``name`` with ``config`` and mount it."""
        cls = load_plugin(name, entry_id=entry_id)
        cfg = build_config(cls, config or {}, entry=entry_id or name)
        return self.provide(cls(self, cfg), origin=entry_id or name)

    def ensure_defaults(self) -> None:
        for key, name in DEFAULT_PROVIDERS.items():
            if key not in self._services:
                self.mount(name)

    # -- access -----------------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self._services

    def get(self, key: str) -> Service | None:
        return self._services.get(key)

    def require(self, key: str) -> Service:
        try:
            return self._services[key]
        except KeyError:
            raise MissingServiceError(
                f"ctx.{key} is not mounted; add a provider for it to the composition"
            ) from None

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return self.require(key)

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


# -- plugin lookup --------------------------------------------------------------
def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    # Imported here: scanning installed distributions is slow, and the CLI's
    # `run` builds its context from direct imports without it.
    from importlib import metadata

    return {ep.name: ep for ep in metadata.entry_points(group=group)}


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


# -- config validation ------------------------------------------------------------
def build_config(cls: type[Service], raw: Mapping[str, Any], *, entry: str) -> Any:
    """Validate ``raw`` against ``cls.Config`` (a dataclass) and build it.

    Unknown fields and wrong types are errors naming the entry and the field.
    """
    config_cls = cls.Config
    if not isinstance(raw, Mapping):
        raise CompositionError(f"entry {entry!r}: config must be a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for key in raw:
        if key not in fields:
            known = ", ".join(sorted(fields)) or "(none)"
            raise CompositionError(
                f"entry {entry!r}: unknown config field {key!r} for {cls.plugin_name or cls.__name__}; "
                f"known fields: {known}"
            )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        values[key] = _coerce(value, hints.get(key, Any), entry=entry, field=key)
    try:
        return config_cls(**values)
    except (TypeError, ValueError) as exc:
        raise CompositionError(f"entry {entry!r}: invalid config: {exc}") from None


def _coerce(value: Any, hint: Any, *, entry: str, field: str) -> Any:
    ok, coerced = _check(value, hint)
    if not ok:
        raise CompositionError(
            f"entry {entry!r}: config field {field!r} must be {_describe(hint)}, got {value!r}"
        )
    if isinstance(coerced, (int, float)) and not isinstance(coerced, bool):
        from dsh.sandbox.numeric import NumberError, config_number

        try:
            config_number(field, coerced)
        except NumberError as exc:
            raise CompositionError(f"entry {entry!r}: config field {exc}") from None
    return coerced


def _check(value: Any, hint: Any) -> tuple[bool, Any]:
    if hint is Any:
        return True, value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            ok, coerced = _check(value, arg)
            if ok:
                return True, coerced
        return False, value
    if origin is typing.Literal:
        return (value in args), value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if hint is str:
        return isinstance(value, str), value
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False, value
        inner = args[0] if args else Any
        out = []
        for item in value:
            ok, coerced = _check(item, inner)
            if not ok:
                return False, value
            out.append(coerced)
        return True, tuple(out) if origin is tuple or hint is tuple else out
    if origin in (dict, Mapping) or hint in (dict,):
        if not isinstance(value, Mapping):
            return False, value
        return True, dict(value)
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value


def _describe(hint: Any) -> str:
    if hint is Any:
        return "any value"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if hint is type(None):
        return "null"
    if origin in (tuple, list):
        return f"a list of {_describe(args[0]) if args else 'values'}"
    return getattr(hint, "__name__", str(hint))


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
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CompositionError(f"composition {str(p)!r}: cannot read: {exc.strerror}") from None
    try:
        if p.suffix == ".toml":
            import tomllib

            data: Any = tomllib.loads(text)
        else:
            import yaml  # lazily: only compositions need it

            data = yaml.safe_load(text)
    except Exception as exc:
        raise CompositionError(f"composition {str(p)!r}: not valid {p.suffix or 'YAML'}: {exc}") from None
    return parse_composition(data, source=str(p))


def build_context(
    entries: Iterable[CompositionEntry | Mapping[str, Any]] | str | Path,
    *,
    defaults: bool = True,
) -> Context:
    """Build a context from a composition (entries, or a YAML/TOML file path)."""
    if isinstance(entries, (str, Path)):
        parsed = load_composition_file(entries)
    else:
        items = list(entries)
        parsed = [e for e in items if isinstance(e, CompositionEntry)]
        raw = [e for e in items if not isinstance(e, CompositionEntry)]
        if raw:
            parsed = parse_composition(raw) if not parsed else parsed + parse_composition(raw)
    ctx = Context()
    try:
        # Core services first: executors look them up when they are built.
        names = {e.name for e in parsed}
        if defaults:
            for key, name in DEFAULT_PROVIDERS.items():
                provides_key = any(_provides(e.name) == key for e in parsed)
                if not provides_key and name not in names:
                    ctx.mount(name)
        for entry in sorted(parsed, key=lambda e: _order(e.name)):
            ctx.mount(entry.name, entry.config, entry_id=entry.id)
    except BaseException:
        ctx.close()
        raise
    return ctx


def _provides(name: str) -> str | None:
    try:
        return load_plugin(name).key
    except CompositionError:
        return None


# Mount order: infrastructure, then policy and runners, then executors, then tools.
_ORDER: Mapping[str, int] = {
    "subprocess": 0,
    "shell_env": 1,
    "jobs": 2,
    "approval": 3,
    "sandbox_policy": 4,
    "sandbox": 5,
    "shell": 6,
}


def _order(name: str) -> int:
    key = _provides(name)
    return _ORDER.get(key or "", 10)


ServiceFactory = Callable[[Context], Service]
