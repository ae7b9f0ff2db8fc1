"""The resolved, canonical sandbox policy a runner enforces (value types only).

The policy *service* (``ctx.require(PolicyService)``, in ``policy_service``) turns a
profile, the workspace and a per-call request into one ``SandboxPolicy``.
Runners receive nothing else: every path here is absolute and canonical
(symlinks resolved), every choice explicit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.sandbox.modes import SandboxMode

if TYPE_CHECKING:
    from dsh.sandbox.net_rules import NetworkRules


@dataclass(frozen=True)
class ResourceLimits:
    """Per-command limits; ``None`` means the runner sets none."""

    wall_time_s: float | None = None
    max_processes: int | None = None
    max_memory_bytes: int | None = None
    max_file_size_bytes: int | None = None

    def is_empty(self) -> bool:
        # Explicit fields, not dataclasses.astuple: this runs for every command.
        return (self.wall_time_s is None and self.max_processes is None
                and self.max_memory_bytes is None and self.max_file_size_bytes is None)


@dataclass(frozen=True)
class SandboxPolicy:
    """Everything a runner needs to enforce one command's mode.

    - ``writable_roots``: canonical directories writable in workspace-write (the
      workspace, the profile's extra roots, the sandbox HOME, the private
      temporary directory, or ``/tmp`` and ``$TMPDIR`` when shared).  Empty in read-only; unused in danger-full-access.
    - ``protected_paths``: canonical paths that stay read-only inside writable
      roots, including ones that do not exist yet (``.git``, the git dir a
      ``.git`` file points to, ``.dsh``, the profile's names).
    - ``read_only_paths``: extra paths forced read-only even under a writable root.
    - ``hidden_paths``: paths the command may not read at all.
    - ``missing_roots``: extra writable roots the profile named that do not exist;
      reported, never silently dropped.
    - ``git``: ``read-only`` (every repository's git dir) or ``commit`` (only
      the parts git runs or trusts: hooks, config, info, ...).
    - ``unscanned_roots``: where the search for nested repositories and
      protected names stopped (a root with too many entries, a directory we
      cannot list or whose path is too long); a runner that gets any reports
      ``protected-scan-incomplete``.
    - ``accept_degraded``: names of degraded enforcements the profile accepts
      (e.g. ``"landlock-protected-paths"``); anything else partial is refused.
    - ``home``: the command's ``HOME`` (a writable root in workspace-write, see
      ``sandbox_home``), or ``None`` to keep the real, read-only one.
    - ``private_tmp``: the session's own temporary directory (a writable root
      in workspace-write, see ``private_tmp``): ``$TMPDIR`` names it, and a
      runner with a mount namespace shows it at ``/tmp`` as well; ``None``
      when the profile shares the host's ``/tmp`` or excludes it.
    - ``state_paths``: the hidden paths that are dsh-sandbox's own state (other
      workspaces' HOMEs, spill files, the escalation log; see ``own_state``),
      also listed in ``hidden_paths``.  A runner that can hide only their
      contents says so in ``explain`` without declaring a degradation: their
      names tell a command nothing it could use.
    """

    mode: SandboxMode
    workspace: Path
    writable_roots: tuple[Path, ...] = ()
    protected_paths: tuple[Path, ...] = ()
    read_only_paths: tuple[Path, ...] = ()
    hidden_paths: tuple[Path, ...] = ()
    network: bool = False
    env_passthrough: tuple[str, ...] = ()
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    allowed_runners: tuple[str, ...] = ()
    accept_degraded: tuple[str, ...] = ()
    missing_roots: tuple[Path, ...] = ()
    profile: str = ""
    git: str = "read-only"  # "commit": objects, refs, index writable; hooks and config not
    unscanned_roots: tuple[Path, ...] = ()  # where the search for nested repositories stopped
    home: Path | None = None  # HOME inside the sandbox; None: the real one (read-only)
    private_tmp: Path | None = None  # the session's /tmp and $TMPDIR; None: shared or none
    state_paths: tuple[Path, ...] = ()  # hidden paths holding dsh-sandbox's own state
    # The network only through the host's allowlist proxy (``network`` is then off):
    # the names the command may reach.  A runner that cannot do it refuses the run.
    network_allowlist: NetworkRules | None = None

    def __post_init__(self) -> None:
        if self.network and self.network_allowlist is not None:
            raise ValueError("network is either on (network=True) or limited to an allowlist, not both")
        # No runner wraps an unconstrained command: an allowlist beside it would
        # be silently dropped, so the value itself cannot be made.
        if self.network_allowlist is not None and not self.mode.constrains:
            raise ValueError(f"{self.mode.value} runs the command unwrapped, with the whole network: a network "
                             "allowlist cannot apply to it; use workspace-write or read-only, or drop the allowlist")

    def __hash__(self) -> int:
        # Runners key their per-policy state (spawners, plans, pins, the runner
        # chosen) by the policy, which holds a path per other workspace's HOME:
        # hashed once, not at every lookup of every command.
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def constrained(self) -> bool:
        return self.mode.constrains

    def to_dict(self) -> dict[str, object]:
        def conv(v: object) -> object:
            if isinstance(v, Path):
                return str(v)
            if isinstance(v, SandboxMode):
                return v.value
            if isinstance(v, tuple):
                return [conv(x) for x in v]
            if isinstance(v, ResourceLimits):
                return dataclasses.asdict(v)
            return v

        return {f.name: conv(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class PolicyRequest:
    """What a call may ask of the policy service: a mode (only via escalation)."""

    mode: SandboxMode | None = None
