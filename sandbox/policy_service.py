"""``ctx.sandbox_policy``: the session's default mode, workspace and profile.

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

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.profiles import Profile, load_profile

ALWAYS_PROTECTED = (".git", ".dsh")

# Never writable outside danger-full-access: these trees and everything in them
# (writing there changes the system for every later command) ...
SYSTEM_TREES = tuple(
    Path(p)
    for p in (
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/proc",
        "/sbin",
        "/sys",
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/include",
        "/usr/share",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/usr/local/lib",
        "/System",
        "/private/etc",
    )
)
# ... and these directories themselves (their subdirectories are ordinary
# places for projects, e.g. /home/me/src or /usr/src/app).
SYSTEM_DIRS = tuple(
    Path(p)
    for p in (
        "/",
        "/home",
        "/Users",
        "/var",
        "/run",
        "/opt",
        "/srv",
        "/root",
        "/mnt",
        "/media",
        "/Applications",
        "/Library",
        "/private",
        "/private/var",
    )
)

_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_GITDIR_MAX = 4096


@dataclass(frozen=True)
class PolicyConfig:
    mode: str | None = None  # default: the profile's mode, else workspace-write
    profile: str | None = None  # built-in name or path; default: the mode's built-in
    workspace: str | None = None  # default: the process cwd at configure time
    writable: tuple[str, ...] = ()  # extra writable roots (must exist)
    network: bool | None = None  # overrides the profile
    accept_degraded: tuple[str, ...] = ()


# -- paths ----------------------------------------------------------------------------
def canonical(path: str | Path, base: Path | None = None) -> Path:
    """Absolute path with symlinks and ``..`` resolved (missing tails kept lexically)."""
    p = Path(path)
    if not p.is_absolute():
        p = (base or Path.cwd()) / p
    return Path(os.path.realpath(p))


def expand(text: str) -> str | None:
    """``~`` and ``$VAR``/``${VAR}`` expanded; ``None`` when a variable is unset."""
    missing: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        value = os.environ.get(name)
        if value is None:
            missing.append(name)
            return m.group(0)
        return value

    out = _VAR.sub(sub, os.path.expanduser(text))
    return None if missing else out


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def system_dir_reason(path: Path) -> str | None:
    """Why ``path`` (canonical) may not be a writable root, or ``None``."""
    for tree in SYSTEM_TREES:
        if is_within(path, tree):
            return f"it is inside the system directory {tree}"
        if path in tree.parents:
            return f"it contains the system directory {tree}"
    if path in SYSTEM_DIRS:
        return "it is a system directory"
    return None


def git_dirs(dot_git: Path) -> list[Path]:
    """The real git dir(s) a ``.git`` *file* points to (``gitdir: <path>``).

    A worktree's git dir has a ``commondir`` file naming the main repository's
    git dir (hooks, config): that one is returned too.
    """
    found: list[Path] = []
    try:
        if not dot_git.is_file():
            return found
        with open(dot_git, encoding="utf-8", errors="replace") as fh:
            text = fh.read(_GITDIR_MAX)
    except OSError:
        return found
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = canonical(line[len("gitdir:") :].strip(), dot_git.parent)
            found.append(target)
            try:
                common = (target / "commondir").read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                common = ""
            if common:
                found.append(canonical(common, target))
            break
    return found


def protected_under(root: Path, names: Iterable[str]) -> set[Path]:
    """Protected paths of one writable root, existing or not.

    Each ``<root>/<name>`` is kept as named (so it stays read-only even before it
    exists) plus its canonical target when it is (or goes through) a symlink,
    plus the git dir(s) a ``.git`` file points to.
    """
    out: set[Path] = set()
    for name in names:
        named = root / name
        out.add(named)
        out.add(canonical(named))
        if name == ".git":
            out.update(git_dirs(named))
    return out


def _sorted(paths: Iterable[Path]) -> tuple[Path, ...]:
    return tuple(sorted(set(paths)))


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
        self._workspace = self._check_workspace(cfg.workspace)
        self._extra = tuple(self._check_flag_root(raw) for raw in cfg.writable)
        # Surface every configuration error now, not at the first command.
        self._default_policy = self.resolve()

    # -- configuration checks --------------------------------------------------------
    @staticmethod
    def _check_workspace(raw: str | None) -> Path:
        shown = raw if raw is not None else os.getcwd()
        path = canonical(os.path.expanduser(shown))
        if not path.exists():
            raise ConfigError(
                f"workspace: {shown} does not exist; create it or pass --workspace DIR"
            )
        if not path.is_dir():
            raise ConfigError(
                f"workspace: {shown} is a file, not a directory; pass --workspace DIR"
            )
        return path

    def _check_flag_root(self, raw: str) -> Path:
        expanded = expand(raw)
        if expanded is None:
            raise ConfigError(
                f"--writable {raw}: names an unset environment variable; "
                "set it or pass the directory itself"
            )
        path = canonical(expanded, self._workspace)
        if not path.is_dir():
            what = "is not a directory" if path.exists() else "does not exist"
            raise ConfigError(
                f"--writable {raw}: {path} {what}; create the directory or drop the flag"
            )
        return path

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
            return SandboxPolicy(writable_roots=(Path("/"),), network=True, **common)
        network = self.config.network
        if network is None:
            network = bool(profile.network)
        writable: list[Path] = []
        missing: list[Path] = []
        if chosen is SandboxMode.WORKSPACE_WRITE:
            writable, missing = self._writable_roots()
        protected: set[Path] = set()
        for root in writable:
            protected |= protected_under(root, (*ALWAYS_PROTECTED, *profile.protected_names))
        return SandboxPolicy(
            writable_roots=_sorted(writable),
            protected_paths=_sorted(protected),
            read_only_paths=_sorted(self._paths("read_only_paths", profile.read_only_paths)),
            hidden_paths=_sorted(
                p for p in self._paths("hidden_paths", profile.hidden_paths) if os.path.lexists(p)
            ),
            network=network,
            missing_roots=_sorted(missing),
            **common,
        )

    def _writable_roots(self) -> tuple[list[Path], list[Path]]:
        """Workspace, profile roots, flag roots, and /tmp + $TMPDIR unless excluded."""
        roots: list[tuple[str, Path]] = [("workspace", self._workspace)]
        missing: list[Path] = []
        for raw in self._profile.writable_roots:
            expanded = expand(raw)
            if expanded is None:
                missing.append(Path(raw))  # an unset variable: reported, never guessed
                continue
            path = canonical(expanded, self._workspace)
            if path.is_dir():
                roots.append((f"profile {self._profile.name}: writable_roots entry {raw!r}", path))
            else:
                missing.append(path)
        roots.extend(
            (f"--writable {raw}", path)
            for raw, path in zip(self.config.writable, self._extra, strict=True)
        )
        if not self._profile.exclude_tmp:
            for label, raw_tmp in (("/tmp", "/tmp"), ("$TMPDIR", os.environ.get("TMPDIR"))):
                if raw_tmp:
                    tmp = canonical(raw_tmp)
                    if tmp.is_dir():
                        roots.append((f"{label} ({raw_tmp})", tmp))
                    else:
                        missing.append(tmp)
        for label, path in roots:
            reason = system_dir_reason(path)
            if reason is not None:
                fix = (
                    "use exclude_tmp = true in the profile or set TMPDIR to a private directory"
                    if label.startswith("$TMPDIR")
                    else "name a project directory instead, or use --mode danger-full-access"
                )
                raise ConfigError(
                    f"{label}: refusing to make {path} writable in workspace-write "
                    f"({reason}); {fix}"
                )
        return [path for _label, path in roots], missing

    def _paths(self, key: str, raws: Iterable[str]) -> list[Path]:
        out: list[Path] = []
        for raw in raws:
            expanded = expand(raw)
            if expanded is None:
                # Failing closed: a path we cannot name cannot be hidden or kept read-only.
                raise ConfigError(
                    f"profile {self._profile.name}: {key} entry {raw!r} names an unset "
                    "environment variable; set it or change the profile"
                )
            out.append(canonical(expanded, self._workspace))
        return out


# -- describing -------------------------------------------------------------------------
def describe_policy(policy: SandboxPolicy) -> list[str]:
    """Human lines for ``profile explain``: what the policy allows and forbids."""
    lines = [
        f"mode: {policy.mode.value}" + (f" (profile {policy.profile})" if policy.profile else ""),
        f"workspace: {policy.workspace}",
    ]
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        lines.append("writes: everywhere (no sandbox; the command runs unwrapped)")
        lines.append("network: on")
    else:
        if policy.writable_roots:
            lines.append("writable roots:")
            lines.extend(f"  {p}" for p in policy.writable_roots)
        else:
            lines.append("writable roots: none (only /dev/null)")
        if policy.missing_roots:
            lines.append("missing roots (not writable until they exist):")
            lines.extend(f"  {p}" for p in policy.missing_roots)
        for title, paths in (
            (
                "protected (read-only inside writable roots, existing or not)",
                policy.protected_paths,
            ),
            ("read-only", policy.read_only_paths),
            ("hidden (unreadable)", policy.hidden_paths),
        ):
            if paths:
                lines.append(f"{title}:")
                lines.extend(f"  {p}" for p in paths)
        lines.append(f"network: {'on' if policy.network else 'off'}")
    lines.append("env passthrough: " + (", ".join(policy.env_passthrough) or "none"))
    limits = policy.limits
    parts = [
        f"{label}={value}"
        for label, value in (
            ("wall_time_s", limits.wall_time_s),
            ("max_processes", limits.max_processes),
            ("max_memory", _size(limits.max_memory_bytes)),
            ("max_file_size", _size(limits.max_file_size_bytes)),
        )
        if value is not None
    ]
    lines.append("limits: " + (", ".join(parts) or "none"))
    lines.append("runners: " + (", ".join(policy.allowed_runners) or "any"))
    lines.append("accepted degradations: " + (", ".join(policy.accept_degraded) or "none"))
    return lines


def _size(value: int | None) -> str | None:
    if value is None:
        return None
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return f"{value}B"
