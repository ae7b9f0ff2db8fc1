"""One way to build a session: a ``SessionSpec`` value in, a ``Context`` out.

Every caller (the ``run`` and ``tool`` commands, conformance, bench, embedders
with a composition file) describes its session as a ``SessionSpec`` and calls
``build_session``.  The spec is plain data, so flags and config files feed it
field by field; equal specs build equal contexts.  Providers are named, never
imported here: the core does not depend on the executors or tools that a
session mounts, and ``load`` lets a caller that must start fast resolve the
names without scanning entry points.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from dsh.sandbox.context import CompositionEntry, Context, Loader, build_context

#: The provider names of the seams this layer defines.
POLICY_PROVIDER = "sandbox-policy"
HOST_PROVIDER = "sandbox"

def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value))


@dataclasses.dataclass(frozen=True)
class SessionSpec:
    """What a session is made of.  Every field is plain data.

    ``composition``: a YAML/TOML composition file that describes the whole
    session instead (the other fields must then keep their defaults).
    ``executor``: the provider of ``ctx.require(ShellExecutor)`` (e.g. ``bash-sandbox``), None
    for a session without one; ``executor_config`` is its config.
    ``sandboxed``: False mounts no policy and no runner host (for an
    unsandboxed executor such as ``bash-local``; the policy fields must then
    keep their defaults).  ``runner_options``: per-runner options, by runner
    name.  ``env``: variables set for every command.  ``approval``: ``deny``,
    ``prompt`` or ``rules:FILE``; None mounts no approval provider.
    ``services``: further providers to mount (e.g. the job registry).
    ``keep_warm_s``: how long a container-like sandbox is kept idle after the
    session for the next one of the same workspace and policy (None: removed).
    """

    composition: str | None = None
    sandboxed: bool = True
    executor: str | None = None
    executor_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    mode: str | None = None
    profile: str | None = None
    workspace: str | None = None
    writable: tuple[str, ...] = ()
    force_writable: tuple[str, ...] = ()
    network: bool | None = None
    network_source: str | None = None  # where ``network`` was set for every run; None: for this one
    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()
    accept_degraded: tuple[str, ...] = ()
    runner: str = "auto"
    runner_options: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    approval: str | None = None
    services: tuple[CompositionEntry, ...] = ()
    keep_warm_s: float | None = None

    def __post_init__(self) -> None:
        # Copies behind read-only views: a caller's dict changed later cannot
        # change a session described earlier.
        object.__setattr__(self, "executor_config", _frozen(self.executor_config))
        object.__setattr__(
            self, "runner_options", _frozen({k: _frozen(v) for k, v in self.runner_options.items()})
        )
        object.__setattr__(self, "env", _frozen(self.env))

    def entries(self) -> list[CompositionEntry]:
        """The composition entries this spec stands for (not for ``composition``)."""
        policy = {
            "mode": self.mode,
            "profile": self.profile,
            "workspace": self.workspace,
            "writable": list(self.writable),
            "force_writable": list(self.force_writable),
            "network": self.network,
            **({"network_source": self.network_source} if self.network_source is not None else {}),
            **({"allow_domains": list(self.allow_domains)} if self.allow_domains else {}),
            **({"deny_domains": list(self.deny_domains)} if self.deny_domains else {}),
            "accept_degraded": list(self.accept_degraded),
        }
        host = {"runner": self.runner, "options": {k: dict(v) for k, v in self.runner_options.items()},
                **({"keep_warm_s": self.keep_warm_s} if self.keep_warm_s is not None else {})}
        out: list[CompositionEntry] = []
        if self.sandboxed:
            out += [
                CompositionEntry(POLICY_PROVIDER, POLICY_PROVIDER, policy),
                CompositionEntry(HOST_PROVIDER, HOST_PROVIDER, host),
            ]
        if self.executor is not None:
            config = dict(self.executor_config)
            if self.env:
                config["env"] = {**config.get("env", {}), **self.env}
            out.append(CompositionEntry("shell", self.executor, config))
        if self.approval is not None:
            from dsh.sandbox.approval import approval_option

            name, config = approval_option(self.approval)
            out.append(CompositionEntry("approval", name, config))
        return [*out, *self.services]


def host_only(runner: str = "auto") -> SessionSpec:
    """A session with the runner host and nothing else: listing and probing
    runners, where no single policy applies."""
    return SessionSpec(sandboxed=False, services=(CompositionEntry(HOST_PROVIDER, HOST_PROVIDER, {"runner": runner}),))


def build_session(spec: SessionSpec, *, load: Loader | None = None) -> Context:
    """The context ``spec`` describes, its services mounted in dependency order.

    ``load`` resolves a provider name to its class (default: the entry points).
    Raises ``ConfigError`` (``CompositionError``) naming the entry and field
    of a bad config; nothing has run then."""
    if spec.composition is not None:
        _only_defaults(spec, _NOT_WITH_COMPOSITION, f"composition {spec.composition!r} describes the whole session")
        return build_context(spec.composition, load=load)
    if not spec.sandboxed:
        _only_defaults(spec, _POLICY_FIELDS, "sandboxed=False mounts no policy and no runner")
    return build_context(spec.entries(), load=load)


_DEFAULT = SessionSpec()
_POLICY_FIELDS = (
    "mode", "profile", "workspace", "writable", "force_writable", "network", "network_source", "allow_domains",
    "deny_domains",
    "accept_degraded", "runner", "runner_options", "keep_warm_s",
)
_NOT_WITH_COMPOSITION = tuple(f.name for f in dataclasses.fields(SessionSpec) if f.name != "composition")


def _only_defaults(spec: SessionSpec, names: tuple[str, ...], why: str) -> None:
    changed = [name for name in names if getattr(spec, name) != getattr(_DEFAULT, name)]
    if changed:
        from dsh.sandbox.errors import ConfigError

        raise ConfigError(f"{why}; {', '.join(changed)} cannot be set beside it: drop them")
