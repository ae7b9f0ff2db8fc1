"""``ctx.require(PolicyService)``: the session's default mode, workspace and profile.

The service is configured once (mode, profile, workspace, extra roots) and
never changes afterwards.  ``resolve(mode)`` turns it, plus an optional
per-call mode (only ever asked for through escalation), into one explicit,
canonical ``SandboxPolicy``: every path absolute with symlinks and ``..``
resolved, every tuple sorted and deduplicated so equal policies hash equal
(runners cache by policy).

Protected paths are recomputed on every ``resolve`` because what they point at
can change between calls (a ``.git`` file appears, a protected name becomes a
symlink); the roots they hang off are fixed at configure time.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsh.sandbox.context import Context, Service
from dsh.sandbox.enclosing_repo import enclosing_repository, kept_read_only, named_by_config
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.git_dir_links import remove_planted
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.net_policy import session_network
from dsh.sandbox.own_state import hidden_state, log_dir_refusal, record_state_places
from dsh.sandbox.pins import Pin, PinnedPaths, PinStore, Resolved
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_guard import root_refusal
from dsh.sandbox.policy_paths import (
    ALWAYS_PROTECTED,
    canonical,
    expand,
    protected_under,
    sorted_paths,
    system_dir_reason,
)
from dsh.sandbox.policy_roots import flag_root, gather_roots, profile_paths
from dsh.sandbox.private_tmp import SHARED, PrivateTmp
from dsh.sandbox.profile_schema import degradation_problem
from dsh.sandbox.profiles import Profile, load_profile
from dsh.sandbox.protected_scan import (
    DEFAULT_PROTECTED_NAMES,
    Found,
    GitAccess,
    TreeIndex,
    git_dirs_of,
    protected_from,
)
from dsh.sandbox.root_checks import refuse_dangerous_roots, refuse_overlaps
from dsh.sandbox.sandbox_home import PER_WORKSPACE, resolve_home, workspace_home
from dsh.sandbox.trusted_changes import (
    Baseline,
    Changes,
    git_dir_identities,
    git_dirs_since,
    run_started_ns,
    trusted_changes,
)

__all__ = ["ALWAYS_PROTECTED", "PolicyConfig", "PolicyService", "system_dir_reason"]

#: How soon after the session's start its first command may take the search
#: the start made instead of walking the writable roots again (``_find``).
START_SEARCH_REUSE_S = 0.25


@dataclass(frozen=True)
class PolicyConfig:
    mode: str | None = None  # default: the profile's mode, else workspace-write
    profile: str | None = None  # built-in name or path; default: the mode's built-in
    workspace: str | None = None  # default: the process cwd at configure time
    writable: tuple[str, ...] = ()  # extra writable roots (must exist; relative to the cwd)
    network: bool | None = None  # overrides the profile
    #: Where ``network`` was set for every run ("env ...", "FILE:LINE"), which never widens an
    #: allowlist; None: chosen for this run (a flag, the caller).
    network_source: str | None = None
    allow_domains: tuple[str, ...] = ()  # narrow the network to these hosts (and the profile's)
    deny_domains: tuple[str, ...] = ()  # refused even when an allow entry covers them
    accept_degraded: tuple[str, ...] = ()
    #: Writable roots accepted although they hold credentials or start-up files
    #: (``--force-writable``); relative to the cwd.  System trees stay refused.
    force_writable: tuple[str, ...] = ()


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(values)))


# -- the service ----------------------------------------------------------------------
class PolicyService(Service):
    """Resolves the session's (or an escalated call's) canonical ``SandboxPolicy``."""

    key = "sandbox_policy"
    Config = PolicyConfig

    def __init__(self, ctx: Context, config: PolicyConfig | None = None) -> None:
        super().__init__(ctx, config)
        cfg: PolicyConfig = self.config
        if cfg.mode is not None:
            mode: SandboxMode | None = SandboxMode.parse(cfg.mode)
        else:
            mode = None
        if cfg.profile is not None:
            self._profile = load_profile(cfg.profile)
        else:
            self._profile = load_profile((mode or SandboxMode.WORKSPACE_WRITE).value)
        self._default_mode = mode or self._profile.mode or SandboxMode.WORKSPACE_WRITE
        # Checked before anything is built: a refused combination leaves nothing behind.
        self._network, self._network_allowlist = session_network(
            self._profile, network=cfg.network, source=cfg.network_source, allow=cfg.allow_domains,
            deny=cfg.deny_domains)
        if self._network_allowlist is not None and self._default_mode is SandboxMode.DANGER_FULL_ACCESS:
            raise ConfigError("danger-full-access runs the command unwrapped, with the whole network: a network "
                              "allowlist (--allow-domain, or [network] in the profile) cannot apply to it; run in "
                              "workspace-write or read-only, or drop the allowlist")
        if self._network_allowlist is not None:
            for secret in self._network_allowlist.secrets:
                if not os.environ.get(secret.env):
                    raise ConfigError(f"network.secrets: {secret.env} is not set in dsh-sandbox's environment; set "
                                      "it there (the command gets a placeholder, never the value), or remove the "
                                      "entry from the profile")
        for name in cfg.accept_degraded:
            problem = degradation_problem(name)
            if problem is not None:
                raise ConfigError(f"accept_degraded: {problem[0]}; {problem[1]}")
        # Every policy path is resolved by one walk that checks each link it
        # meets and ends holding an fd (``pins``); the session keeps the fds.
        self._pins = PinStore()
        try:
            self._configure(cfg)
        except BaseException:
            self._pins.close()
            raise

    def _configure(self, cfg: PolicyConfig) -> None:
        # As written, made absolute without resolving anything: what the walk
        # starts from (the cwd is canonical already).
        shown = cfg.workspace if cfg.workspace is not None else os.getcwd()
        self._workspace_written = Path.cwd() / os.path.expanduser(shown)
        # The workspace is fixed for the session: resolved and held once.
        self._workspace_pin = self._check_workspace(shown, self._workspace_written)
        self._workspace = self._workspace_pin.path
        flag_roots = [(f"--writable {raw}", flag_root(self._pins, raw).path) for raw in cfg.writable]
        self._forced = self._forced_roots()
        if self._default_mode is SandboxMode.WORKSPACE_WRITE:
            # Before the sandbox HOME is made: a refused run leaves nothing
            # behind (a cache inside the workspace would get it otherwise).
            refuse_dangerous_roots([("workspace", self._workspace), *flag_roots],
                                   own_home=self._own_home_path(), forced=self._forced)
        self._git: GitAccess = "commit" if self._profile.git == "commit" else "read-only"
        # Names kept read-only wherever they exist; the session's index of the
        # writable trees makes every later search cost one lstat per directory.
        self._trusted_names = (*DEFAULT_PROTECTED_NAMES, *ALWAYS_PROTECTED, *self._profile.protected_names)
        self._index = TreeIndex(self._trusted_names, keep=True)
        # The latest search of each set of roots: a run's baseline (few sets per session).
        self._latest: dict[frozenset[Path], Found] = {}
        self._latest_lock = threading.Lock()
        # The search made while the session started, and when it ended, for
        # its first command (see ``_find``).
        self._start_search: tuple[frozenset[Path], Found, float] | None = None
        self._last_search: tuple[frozenset[Path], Found, float] | None = None
        self._temp = {canonical(raw) for raw in ("/tmp", os.environ.get("TMPDIR")) if raw}
        # Made at the first workspace-write resolve, removed when the session closes.
        self._private_tmp: PrivateTmp | None = None
        self._tmp_lock = threading.Lock()
        # Surface every configuration error now, not at the first command.
        try:
            self._default_policy = self.resolve()
            self._keep_start_search(self._default_policy)
            log_refused = log_dir_refusal([self._home] if self._home is not None else [])
            if log_refused is not None:
                raise ConfigError(log_refused)
            record_state_places()
        except BaseException:
            self.close()  # the private /tmp made on the way: nobody will close this service
            raise

    # -- configuration checks --------------------------------------------------------
    def _check_workspace(self, shown: str, written: Path) -> Pin:
        pin = self._pins.walk("workspace", str(written), written).pin
        if pin is None:
            raise ConfigError(f"workspace: {shown} does not exist; create it or pass --workspace DIR")
        if not pin.is_dir:
            raise ConfigError(f"workspace: {shown} is a file, not a directory; pass --workspace DIR")
        return pin

    @functools.cached_property
    def _home(self) -> Path | None:
        """The command's HOME (``sandbox_home``): made private per workspace, or
        the profile's directory; ``None`` keeps the real one."""
        return resolve_home(self._profile.home, self._workspace, f"profile {self._profile.name}: home")

    def _own_home_path(self) -> tuple[Path, ...]:
        """``_own_home`` named, not made."""
        if self._profile.home not in (None, PER_WORKSPACE):
            return ()
        return (workspace_home(self._workspace),)

    @functools.cached_property
    def _own_home(self) -> tuple[Path, ...]:
        """The run's own per-workspace HOME, the one writable root allowed
        inside dsh-sandbox's state (another workspace's HOME is not)."""
        if self._home is None or self._profile.home not in (None, PER_WORKSPACE):
            return ()
        return (self._home,)

    def _forced_roots(self) -> frozenset[Path]:
        forced: set[Path] = set()
        for raw in self._profile.force_writable_roots:
            expanded = expand(raw)
            if expanded is not None:
                forced.add(canonical(expanded, self._workspace))
        for raw in self.config.force_writable:
            expanded = expand(raw)
            if expanded is None:
                raise ConfigError(f"--force-writable {raw}: names an unset environment variable")
            forced.add(canonical(expanded))
        return frozenset(forced)

    # -- accessors ---------------------------------------------------------------------
    @property
    def default_mode(self) -> SandboxMode:
        return self._default_mode

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def workspace(self) -> Path:
        return self._workspace

    @property
    def default_policy(self) -> SandboxPolicy:
        return self._default_policy

    def pins(self, policy: SandboxPolicy) -> PinnedPaths | None:
        """The fds held for ``policy``'s paths, if this service resolved it
        (runners bind, grant and read through them, never through the names)."""
        return self._pins.pins_of(policy)

    def trusted_roots(self) -> list[Path]:
        """Every root workspace-write would make writable (in any mode): no
        file that configures a later run may live under one."""
        roots = self._writable_roots(refuse=False)[2]
        private = self._private_tmp
        # The shared /tmp and $TMPDIR count whatever this profile says: a run
        # of another session (tmp = "shared") could have written there.
        shared = [t for t in sorted(self._temp) if t not in roots and t.is_dir()]
        return roots + shared + ([private.path] if private is not None else [])

    def close(self) -> None:
        with self._tmp_lock:
            private, self._private_tmp = self._private_tmp, None
        try:
            if private is not None:
                private.close()
        finally:
            self._pins.close()
        index: TreeIndex | None = getattr(self, "_index", None)  # absent when the configuration was refused
        if index is not None:
            index.save()  # the next session's search lists only what changed

    def _session_tmp(self, roots: Iterable[Path]) -> Path:
        """The session's private temporary directory, made on first use."""
        with self._tmp_lock:
            if self._private_tmp is None:
                self._private_tmp = PrivateTmp.create([*self._temp, *roots])
            return self._private_tmp.path

    # -- resolution ----------------------------------------------------------------------
    def resolve(self, mode: SandboxMode | str | None = None) -> SandboxPolicy:
        """The explicit canonical policy for ``mode`` (default: the session's mode)."""
        chosen = SandboxMode.parse(mode) if mode is not None else self._default_mode
        profile = self._profile
        common: dict[str, Any] = dict(
            mode=chosen,
            workspace=self._workspace,
            env_passthrough=_names(profile.env_passthrough),
            limits=profile.limits,
            allowed_runners=_names(profile.allowed_runners),
            accept_degraded=_names((*profile.accept_degraded, *self.config.accept_degraded)),
            profile=profile.name,
        )
        if chosen is SandboxMode.DANGER_FULL_ACCESS:
            # Nothing is enforced: say so rather than list rules no runner applies.
            full = SandboxPolicy(writable_roots=(Path("/"),), network=True, **common)
            self._pins.remember(full, [self._workspace_pin])
            return full
        # Every root workspace-write would have, whatever the mode: a read-only
        # run must not follow a link an earlier workspace-write run planted.
        writing = chosen is SandboxMode.WORKSPACE_WRITE
        candidates, candidate_missing, _trusted, candidate_pins = self._writable_roots(refuse=writing)
        roots: list[tuple[str, Path]] = []
        missing: list[Path] = []
        pins = [self._workspace_pin]
        private_tmp: Path | None = None
        if writing:
            roots, missing = candidates, candidate_missing
            pins += candidate_pins
            if not profile.exclude_tmp and profile.tmp != SHARED:
                private_tmp = self._session_tmp(path for _label, path in roots)
                roots = [*roots, ("private /tmp", private_tmp)]
        protected: set[Path] = set()
        for _label, root in roots:
            if root in (self._home, private_tmp):
                continue  # only sandboxed commands use these: no host action trusts them
            # Missing ones stay uncreatable (an empty read-only placeholder);
            # .git is not among them: ``git init`` must work, and a repository
            # made during a run is reported after it (``changed_files``).
            protected |= protected_under(root, (*ALWAYS_PROTECTED, *profile.protected_names))
        found = self._find([path for _label, path in roots], for_command=True)
        # The workspace first: a root nested in another is searched with the first one's budget.
        ordered = sorted((path for _label, path in roots), key=lambda p: p != self._workspace)
        unscanned: list[Path] = []
        protected |= protected_from(found, self._git, ordered, unscanned)
        enclosing = enclosing_repository(self._workspace)
        if enclosing is not None:
            protected |= kept_read_only(enclosing, [path for _label, path in roots])
            protected |= named_by_config(enclosing, [path for _label, path in roots])
        read_only_resolved = profile_paths(self._pins, profile, "read_only_paths", profile.read_only_paths,
                                           self._workspace_pin)
        read_only = [r.path for r in read_only_resolved]
        # A missing hidden path holds nothing to hide (runners mask what exists).
        hidden_resolved = [r for r in profile_paths(self._pins, profile, "hidden_paths", profile.hidden_paths,
                                                    self._workspace_pin) if r.pin is not None]
        hidden = [r.path for r in hidden_resolved]
        pins += [r.pin for r in (*read_only_resolved, *hidden_resolved) if r.pin is not None]
        # Other workspaces' HOMEs and every session's spill files: never this run's to read.
        # Not even from a workspace among them (read-only): hidden wins over the
        # workspace there as everywhere, so a runner that cannot hide a path
        # inside the workspace says so (workspace-write makes it a root, refused).
        keep = [*(path for _label, path in roots), *([self._home] if self._home else [])]
        profile_hidden = set(hidden)
        state = [p for p in hidden_state(keep) if p not in profile_hidden]
        hidden += state
        # The state entries are chosen around the roots: they never hold one.
        profiled = [p for p in hidden if p in profile_hidden]
        refuse_overlaps(roots, [("protected", protected), ("read-only", read_only), ("hidden", profiled)])
        policy = SandboxPolicy(
            writable_roots=sorted_paths(path for _label, path in roots),
            protected_paths=sorted_paths(protected),
            read_only_paths=sorted_paths(read_only),
            hidden_paths=sorted_paths(hidden),
            network=self._network,
            network_allowlist=self._network_allowlist,
            missing_roots=sorted_paths(missing),
            git=self._git,
            unscanned_roots=tuple(dict.fromkeys((*found.incomplete, *unscanned))),
            home=self._home,
            private_tmp=private_tmp,
            state_paths=sorted_paths(state),
            **common,
        )
        self._pins.remember(policy, pins)
        return policy

    def _find(self, roots: list[Path], *, for_command: bool = False) -> Found:
        """The repositories and protected names under ``roots``: at any depth in
        the workspace, the configured roots and a shared ``/tmp``; directly
        inside the sandbox's own scratch space (its HOME and private ``/tmp``:
        tool caches, often huge, that only sandboxed commands use).

        ``for_command``: the search is for a command's policy.  The session's
        first command, when it follows the session's start within
        ``START_SEARCH_REUSE_S`` and no command started in between, takes the
        search the start made (``dsh-sandbox run`` would otherwise walk the
        tree twice in a few milliseconds).  That only moves the search a
        moment earlier than the one before the spawn would be: what the host
        makes after either is not protected during the run and is judged
        after it (``changed_files``), as a sandboxed command cannot run in
        between."""
        key = frozenset(roots)
        if for_command:
            with self._latest_lock:
                start, self._start_search = self._start_search, None
            if start is not None and start[0] == key and time.monotonic() - start[2] <= START_SEARCH_REUSE_S:
                return start[1]
        private = self._private_tmp
        own = {p for p in (self._home, private.path if private else None) if p is not None}
        found = self._index.refresh([r for r in roots if r not in own], [r for r in roots if r in own])
        ended = time.monotonic()
        with self._latest_lock:
            self._latest[key] = found
            self._last_search = (key, found, ended)
        return found

    def _keep_start_search(self, policy: SandboxPolicy) -> None:
        with self._latest_lock:
            last = self._last_search
            self._start_search = last if last is not None and last[0] == frozenset(policy.writable_roots) else None

    def baseline(self, policy: SandboxPolicy) -> Baseline | None:
        """What a run under ``policy`` starts from: the latest search of its
        roots (made when the policy was resolved or the last run ended, so
        before anything this run writes), and the time the run starts (what
        changes in place after it is judged by ctime).  Searching again here
        would cost a walk per command for nothing."""
        if policy.mode is not SandboxMode.WORKSPACE_WRITE:
            return None
        since = run_started_ns()
        roots = list(policy.writable_roots)
        with self._latest_lock:
            self._start_search = None  # a command starts: the next one searches again
            found = self._latest.get(frozenset(roots))
        found = found if found is not None else self._find(roots)
        return Baseline(since, found, git_dir_identities(found.repos))

    def changed_files(self, policy: SandboxPolicy, before: Baseline) -> Changes:
        """Git control files and protected names the run created or changed under
        ``policy``'s writable roots, and where they could not be searched for."""
        if policy.mode is not SandboxMode.WORKSPACE_WRITE:
            return Changes()
        after = self._find(list(policy.writable_roots))
        removed, too_large = remove_planted(git_dirs_since(before, after), after.roots)
        changes = trusted_changes(before, after)
        return replace(changes, removed=removed, unsearched=tuple(dict.fromkeys((*changes.unsearched, *too_large))))

    def remove_git_links(self, policy: SandboxPolicy, since_ns: int) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """``changed_files``' removal alone, for a command of a session that
        lives on (a persistent shell): the links made in a git dir since
        ``since_ns``, and the git dirs too large to look through whole.  The
        session's own end removes the rest."""
        if policy.mode is not SandboxMode.WORKSPACE_WRITE:
            return (), ()
        after = self._find(list(policy.writable_roots))
        return remove_planted({d: since_ns for dot_git in after.repos for d in git_dirs_of(dot_git)}, after.roots)

    def _writable_roots(
        self, *, refuse: bool
    ) -> tuple[list[tuple[str, Path]], list[Path], list[Path], list[Pin]]:
        """``policy_roots.gather_roots`` for this profile, refusing dangerous roots when ``refuse``.

        Returns the roots with a label naming where each came from (for errors),
        the missing ones, the roots links are checked against, and the pins of
        the roots.
        """
        workspace = Resolved(self._workspace, self._workspace_pin)
        written, missing = gather_roots(self._pins, self._profile, workspace, self._home, self.config.writable)
        roots = [(label, resolved.path) for label, resolved in written]
        if refuse:
            refuse_dangerous_roots(roots, own_home=self._own_home, forced=self._forced)
        pins = [resolved.pin for _label, resolved in written if resolved.pin is not None]
        # A system directory never becomes a root (refused above in
        # workspace-write): what lies under it is not the command's doing.
        return roots, missing, [path for _label, path in roots if root_refusal(path)[1]], pins
