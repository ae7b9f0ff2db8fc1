"""The filesystem of a docker container: the core mount plan in a container's terms.

``dsh.sandbox.mount_plan`` plans the view once for every runner; this module
only translates it.  A container has no host underneath: it sees only what is
bound into it, so where a namespace sandbox starts from the host read-only,
here the rest of the host does not exist (stricter).  What that changes:

- ``writable`` / ``pin``: a read-write bind onto the same path;
- ``show`` (the read-only workspace, the sandbox HOME, the enclosing
  repository): a read-only bind;
- ``read-only`` / ``placeholder`` / ``mask-*``: only inside something the
  container shows (the workspace, the writable roots, the sandbox HOME, the
  enclosing repository).  Elsewhere there is nothing to keep read-only or to
  hide, and binding it would put a host path into the container that it
  would not otherwise see (what a mask over a mostly hidden directory binds
  again, for one);
- ``/tmp``: the container's own tmpfs (read-only in read-only mode), never
  the host's; the session's private temporary directory is bound at its own
  path (``$TMPDIR`` names it), and what the plan binds beneath ``/tmp`` under a
  private ``/tmp`` (the enclosing repository) lands in that tmpfs.

Binds keep the host path, so cwd and absolute paths mean the same on both
sides.  What docker adds of its own: paths a container cannot take as a bind
are refused, and the user's ``~/.gitconfig`` (which ``GIT_CONFIG_GLOBAL``
names) is bound read-only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import TMP, MountFacts, MountPlan, gather_facts, plan_mounts
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import is_within, path_within

# Where each exec's wrapper records its pid for the kill script (a tmpfs).
CONTROL_DIR = "/run/dsh-sandbox"
_RESERVED = (Path("/"), Path("/proc"), Path("/sys"), Path("/dev"), Path(CONTROL_DIR))



@dataclass(frozen=True)
class MountSpec:
    target: str
    kind: Literal["bind", "tmpfs"]
    read_only: bool
    source: str | None = None  # bind only
    why: str = ""
    exec_ok: bool = False  # tmpfs only: Docker mounts a tmpfs noexec unless told otherwise

    def describe(self) -> str:
        access = "ro" if self.read_only else "rw"
        what = f"bind {self.source}" if self.kind == "bind" else "tmpfs"
        return f"{self.target}: {what} ({access}){' - ' + self.why if self.why else ''}"


def container_view(policy: SandboxPolicy, user: str, *, own_tmp: bool = False,
                   placeholder_source: str | None = None) -> tuple[tuple[MountSpec, ...], MountPlan]:
    """The container's mounts for ``policy`` as the filesystem is now, and the
    core plan they translate, for the container's ``user`` (``uid:gid``; a
    name is unknown here, so no link counts as one it cannot replace).

    ``own_tmp``: the session's private temporary directory is not bound; the
    container's own ``/tmp`` serves as ``$TMPDIR`` (a container kept for later
    sessions must not name one session's directory).  ``placeholder_source``:
    what is bound at a missing protected path (None: its placeholder itself)."""
    _refuse_unbindable(policy)
    # The container's /tmp is its own tmpfs: a root at the host's /tmp is
    # served by it, so a root inside it needs a bind of its own (and no pin
    # of the host's directories between them).
    served = {Path(TMP), *((policy.private_tmp,) if own_tmp and policy.private_tmp is not None else ())}
    if served & set(policy.writable_roots):
        policy = replace(policy, writable_roots=tuple(r for r in policy.writable_roots if r not in served))
    uid = user.split(":")[0]
    facts = gather_facts(policy, int(uid) if uid.isdigit() else None)
    plan = plan_mounts(policy, facts)
    return translate(policy, plan, facts, placeholder_source), plan


def translate(policy: SandboxPolicy, plan: MountPlan, facts: MountFacts,
              placeholder_source: str | None = None) -> tuple[MountSpec, ...]:
    """``plan`` as the container's binds and tmpfs mounts, ordered by depth;
    a placeholder is bound from ``placeholder_source`` when given."""
    writable = policy.mode is not SandboxMode.READ_ONLY
    mounts: dict[str, MountSpec] = {
        CONTROL_DIR: MountSpec(CONTROL_DIR, "tmpfs", False, why="exec pid files for kill"),
        # Read-only means no writes anywhere, the container's own /tmp included.
        # Builds and test suites run what they write to /tmp, as on the host.
        TMP: MountSpec(TMP, "tmpfs", not writable, exec_ok=True, why="private, not the host's /tmp"),
    }
    shown = _shown(policy, plan, facts)
    for entry in plan.entries:
        path, kind = entry.path, entry.kind
        if path == TMP:
            continue  # the container's own tmpfs
        if kind not in ("writable", "pin", "show") and not any(path_within(path, top) for top in shown):
            continue  # not in the container at all
        if kind in ("writable", "pin"):
            mounts[path] = MountSpec(path, "bind", False, path, entry.why)
        elif kind in ("show", "read-only"):
            mounts[path] = MountSpec(path, "bind", True, path, entry.why)
        elif kind == "placeholder":
            mounts[path] = MountSpec(path, "bind", True, placeholder_source or path, f"placeholder: {entry.why}")
        elif kind == "mask-dir":
            mounts[path] = MountSpec(path, "tmpfs", True, why=f"{entry.why} (empty tmpfs)")
        elif kind == "mask-file":
            mounts[path] = MountSpec(path, "bind", True, os.devnull, f"{entry.why} (/dev/null)")
    config = global_git_config(policy)
    if config is not None and str(config) not in mounts:
        mounts[str(config)] = MountSpec(str(config), "bind", True, str(config),
                                        "GIT_CONFIG_GLOBAL: the user's git settings")
    return tuple(sorted(mounts.values(), key=lambda m: (m.target.count("/"), m.target)))


def placeholders(plan: MountPlan, mounts: tuple[MountSpec, ...]) -> tuple[str, ...]:
    """The empty directories the host must hold for the plan's missing protected
    paths: those the container binds (outside what it shows, nothing is there)."""
    targets = {m.target for m in mounts}
    return tuple(sorted(e.path for e in plan.of_kind("placeholder") if e.path in targets))


def _shown(policy: SandboxPolicy, plan: MountPlan, facts: MountFacts) -> list[str]:
    """What the container shows of the host: inside these, the plan's
    read-only paths, placeholders and masks apply; outside, nothing is there."""
    tops = [str(policy.workspace)]
    if policy.mode is not SandboxMode.READ_ONLY:
        tops += [str(r) for r in policy.writable_roots]
    if policy.home is not None:
        tops.append(str(policy.home))
    if not facts.enclosing_system:
        tops += facts.enclosing
    if plan.of_kind("private-tmp"):
        tops.append(TMP)  # the container's tmpfs: what the plan binds beneath it lands there
    return tops


def _refuse_unbindable(policy: SandboxPolicy) -> None:
    roots = [policy.workspace]
    if policy.mode is not SandboxMode.READ_ONLY:
        roots += list(policy.writable_roots)
    hidden = policy.hidden_paths if policy.constrained else ()
    for root in roots:
        if any(is_within(root, h) for h in hidden):
            continue  # hidden wins: never bound
        if root in _RESERVED:
            raise SandboxUnavailable(f"{root} cannot be bind-mounted into a container; "
                                     "remove it from the profile's writable roots", runner="docker")
        if root == policy.workspace and not root.exists():
            raise SandboxUnavailable(f"workspace {root} does not exist", runner="docker")


def global_git_config(policy: SandboxPolicy) -> Path | None:
    """The user's ``~/.gitconfig`` that ``GIT_CONFIG_GLOBAL`` names when the
    command has a sandbox HOME (``sandbox_home.home_env``): bound read-only so
    git finds the user's name and settings, as on the local runners."""
    if policy.home is None or policy.mode is SandboxMode.DANGER_FULL_ACCESS:
        return None
    path = Path(os.path.expanduser("~")) / ".gitconfig"
    if not path.is_file() or any(is_within(path, h) for h in policy.hidden_paths):
        return None
    return path
