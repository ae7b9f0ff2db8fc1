"""What a sandboxed command must never be able to influence: the paths of a
later policy, and the files that configure it.

A command in workspace-write can create symlinks and files anywhere under its
writable roots.  If a later policy followed such a symlink (a writable root,
a hidden or read-only path named through it) or read its profile, approval
rules or composition from such a file, the command would have chosen its own
next sandbox.  Everything here refuses that, with an error naming the field,
the path and the fix.  It also holds the list of directories that are
dangerous to make writable even though they are not system directories (the
user's credentials and start-up files), which only an explicit force accepts.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.policy_paths import canonical, home_dir, is_within, system_dir_reason

# Below a home directory: what the user's shell, ssh, gpg, cloud CLIs,
# editors and agents read or run later as that user.  ~/.config holds systemd
# user units, autostart entries, git and gh configuration; ~/.local/lib the
# user's site-packages; version managers' shims and build tools' init scripts
# run on the next command.
HOME_SENSITIVE = (
    ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config", ".local/bin", ".local/lib",
    ".local/share/systemd", ".local/share/applications", ".password-store", ".cargo/bin",
    ".pyenv", ".rbenv", ".nvm", ".gradle", ".m2", ".bashrc.d", ".vscode", ".vscode-server",
    ".claude", ".codex", ".gemini", ".cursor", ".agents",
)
# Directories that hold other users' homes: when the caller is root, /home/alice
# is as dangerous to make writable as the caller's own home.
_HOMES_PARENTS = (Path("/home"), Path("/Users"))
# Outside the system trees policy_paths refuses outright: the state, caches,
# logs and spools that package managers, cron, systemd, container engines and
# log processors read or run as root later.  Checked both ways: a root inside
# one, or containing one (/var/lib contains /var/lib/dpkg), is refused unless
# forced by name.  Whole trees rather than a list of services: /var/lib alone
# holds dpkg, apt, docker, containerd, kubelet, systemd, sudo, polkit and
# whatever the host installs next.
SYSTEM_SENSITIVE = (
    *(
        Path(prefix + p)
        for prefix in ("", "/private")
        for p in (
            "/var/lib", "/var/cache", "/var/log", "/var/spool", "/var/mail", "/var/db", "/var/backups",
            "/var/opt", "/var/local", "/var/root",
        )
    ),
    Path("/opt/homebrew"),
    Path("/Library"),
)


def root_refusal(path: Path) -> tuple[str | None, bool]:
    """Why ``path`` (canonical) may not be a writable root, and whether naming
    it in ``force_writable_roots``/``--force-writable`` lifts that.

    ``(None, True)``: fine.  System directories cannot be forced; the home
    directory, credentials and start-up files can.
    """
    return _root_refusal(path, home_dir())


@functools.lru_cache(maxsize=512)
def _root_refusal(path: Path, home: Path | None) -> tuple[str | None, bool]:
    # Cached: the roots are the same paths at every resolve (once per command),
    # and these prefix checks over a few dozen directories are not free.
    reason = system_dir_reason(path)
    if reason is not None and path == home:
        # /root is also a system directory, but to its user it is the home: say so.
        return "it is your home directory (shell start-up files, ~/.ssh)", True
    if reason is not None:
        return reason, False
    return dangerous_root_reason(path, home), True


def dangerous_root_reason(path: Path, home: Path | None) -> str | None:
    """Why making ``path`` (canonical) writable hands the command something
    that runs or authenticates outside the sandbox later, or ``None``."""
    if home is not None and home != Path("/"):
        reason = _home_reason(path, home, "you")
        if reason is not None:
            return reason
        for sensitive in (home / name for name in HOME_SENSITIVE):
            if path in sensitive.parents:
                return f"it contains {sensitive} (credentials or files run as you later)"
    other = _other_home(path, home)
    if other is not None:
        reason = _home_reason(path, other, f"the owner of {other}")
        if reason is not None:
            return reason
    if home is not None and home != Path("/") and home in path.parents:
        # The user's own home (say /var/lib/jenkins) is judged by the home
        # rules above, wherever it lies.
        return None
    later = "read or run as root later, e.g. by cron, systemd or a package manager"
    for tree in SYSTEM_SENSITIVE:
        if path == tree:
            return f"it is {tree} ({later})"
        if tree in path.parents:
            return f"it is inside {tree} ({later})"
        if path in tree.parents:
            return f"it contains {tree} ({later})"
    return None


def _home_reason(path: Path, home: Path, who: str) -> str | None:
    """Why ``path`` is dangerous relative to the home directory ``home``."""
    if path == home:
        mine = who == "you"
        what = "your home directory" if mine else f"the home directory {home}"
        return f"it is {what} (shell start-up files, ~/.ssh, ~/.config)"
    for name in HOME_SENSITIVE:
        sensitive = home / name
        if is_within(path, sensitive):
            return f"it is inside {sensitive} (credentials or files run as {who} later)"
    return None


def _other_home(path: Path, home: Path | None) -> Path | None:
    """The home directory of another user ``path`` lies in (``/home/NAME``,
    ``/Users/NAME``), or ``None``."""
    for parent in _HOMES_PARENTS:
        if parent in path.parents:
            candidate = parent / path.relative_to(parent).parts[0]
            if home is None or not is_within(home, candidate):
                return candidate
    return None


def could_be_written(directory: Path) -> bool:
    """Whether a sandboxed command of some earlier run could have created
    entries in ``directory`` (canonical): whether it, or a directory above it,
    can be a writable root in workspace-write, forced or not.

    Only system directories (and what they contain) never can: links there,
    such as /var/run -> /run or macOS's /tmp -> /private/tmp, were made by
    the host.  The owner of a link proves nothing: the docker runner's
    ``user`` option may run commands as root.
    """
    return any(root_refusal(d)[1] for d in (directory, *directory.parents))


def link_refusal(
    label: str, raw: str, path: Path, link: Path, target: str, holder: Path
) -> ConfigError | SandboxUnavailable | None:
    """The error for the symlink ``link`` (-> ``target``) met in the directory
    ``holder`` (canonical) while resolving ``path``, if a sandboxed command
    could have made it; ``None`` when only the host could (a system directory).

    The real path suggested is resolved again: when it no longer goes through
    the link (the link was swapped away meanwhile), the path is changing under
    the walk, and naming it as "the real path" would suggest the raced path
    itself: that is ``SANDBOX_UNAVAILABLE``, retry, as for any path that keeps changing."""
    if not could_be_written(holder):
        return None
    real = canonical(path)
    if real == Path(os.path.normpath(path)) or is_within(real, link):
        if not _still_points(link, target):
            return SandboxUnavailable(
                f"{label}: {raw}: {link} changed between a symlink and a directory while it was resolved; "
                "nothing ran, retry once nothing moves it"
            )
        # Still the same link, and following it loops.
        return ConfigError(
            f"{label}: {raw} resolves through the symlink {link} -> {target}, which lies where a "
            "sandboxed command may write (in or under a possible writable root) and leads to no real "
            "directory (a loop?); remove the link and pass a real directory"
        )
    return ConfigError(
        f"{label}: {raw} resolves through the symlink {link} -> {target}, which lies where a "
        "sandboxed command may write (in or under a possible writable root), so an earlier run "
        f"could have made it; pass the real path {real} instead if you trust "
        "it, or remove the link"
    )


def _still_points(link: Path, target: str) -> bool:
    """Is ``link`` still a link to ``target``, one that loops (ELOOP when
    followed)?  Anything else (a directory swapped in, a link that resolves
    now) means the path changed under the walk."""
    try:
        if os.readlink(link) != target:
            return False
        os.stat(link)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def writable_root_holding(path: Path, roots: Iterable[Path]) -> Path | None:
    """The writable root ``path`` (canonical) lies in, if any."""
    for root in roots:
        if is_within(path, root):
            return root
    return None


def refuse_writable_config_file(what: str, shown: str, roots: Sequence[Path], *, real: str | None = None) -> None:
    """A profile, rules or composition file a sandboxed command could rewrite is refused.

    ``.dsh`` inside the workspace is protected by default, but on landlock
    that protection is itself a degradation a profile may accept, so files
    there are not trusted either: the file must live outside every writable
    root (e.g. ``~/.config/dsh-sandbox/``).  ``real``: the real path of the
    file that was read, taken from its descriptor (not resolved again by name).
    """
    real_path = Path(real) if real is not None else Path(os.path.realpath(os.path.expanduser(shown)))
    root = writable_root_holding(real_path, roots)
    if root is None:
        return
    raise ConfigError(
        f"{what} {shown}: {real_path} lies inside the writable root {root}, so a sandboxed command "
        "could rewrite it to widen a later run; move it outside every writable root, "
        "e.g. to ~/.config/dsh-sandbox/"
    )


def refuse_writable_log(log: Path, roots: Sequence[Path]) -> None:
    """The escalation log (and the denied runs beside it) is appended to by
    the caller, root included: inside a writable root a sandboxed command could
    replace it, or its directory, with a link to a file it wants written."""
    real = Path(os.path.realpath(log.parent)) / log.name
    root = writable_root_holding(real, roots)
    if root is None:
        return
    raise ConfigError(
        f"escalation log {log}: {real} lies inside the writable root {root}, so a sandboxed command could "
        "replace it with a link to a file it wants written; set DSH_HOME (or the approval provider's "
        "log_file) to a directory outside every writable root, e.g. ~/.dsh"
    )
