"""A resolved policy in words, for ``profile explain``: presentation, so the CLI's.

The policy service computes the policy; what a person reads about it (titles,
units, which parts are worth a line) is decided here.
"""

from __future__ import annotations

from dsh.sandbox.enclosing_repo import describe_enclosing
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.private_tmp import describe_tmp


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
        if policy.mode is SandboxMode.WORKSPACE_WRITE:
            lines.append(
                "git: read-only (every repository's git dir)" if policy.git == "read-only" else
                "git: commit (objects, refs, index, logs, packed-refs and the other state a commit "
                "writes are writable; hooks (even missing), config, info, modules, worktrees and the "
                "links that move them stay read-only)"
            )
            lines.append(
                "created or changed during a run and reported after it: .git control files and "
                "protected names at any depth (the sandbox's own HOME and private /tmp: directly inside only)"
            )
            lines.append(describe_tmp(policy))
        lines.extend(describe_enclosing(policy))
        if policy.home is not None:
            lines.append(f"HOME: {policy.home} (the sandbox's own, "
                         + ("writable; " if policy.mode is SandboxMode.WORKSPACE_WRITE else "read-only; ")
                         + "the real home stays read-only; its .gitconfig, .config and .rustup are "
                         "pointed at through GIT_CONFIG_GLOBAL, XDG_CONFIG_HOME and RUSTUP_HOME)")
        else:
            lines.append("HOME: the real home (read-only, minus the hidden paths)")
        if policy.unscanned_roots:
            lines.append("not searched (too big, unreadable, too deep; protected-scan-incomplete):")
            lines.extend(f"  {p}" for p in policy.unscanned_roots)
        rules = policy.network_allowlist
        if rules is not None:
            lines.append("network: only through the allowlist proxy, to " + (", ".join(rules.allow) or "no host"))
            if rules.deny:
                lines.append("  denied: " + ", ".join(rules.deny))
            if rules.allow_private_for:
                lines.append("  private addresses allowed for: " + ", ".join(rules.allow_private_for))
            for secret in rules.secrets:
                lines.append(f"  secret {secret.env}: a placeholder inside; the proxy puts the value in "
                             f"{secret.header} to {', '.join(secret.hosts)}")
        else:
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
