"""A supervisor to kill: starts one sandboxed command, prints its pid, waits.

``python supervisor.py RUNNER WORKSPACE LIMITS VERSIONS -- ARGV...``: the
runner (``landlock`` or ``bwrap``) runs ARGV read-only; ``LIMITS`` is ``-`` or
``wall_time_s=600,max_processes=50``; ``VERSIONS`` (``1,2`` or ``2``) chooses
the cgroup hierarchies, ``2`` behaving as a v2-only host would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(args: list[str]) -> int:
    name, workspace, spec, versions = args[:4]
    argv = args[args.index("--") + 1 :]
    from dsh.runners.linux import cgroups
    from dsh.sandbox.modes import SandboxMode
    from dsh.sandbox.policy import ResourceLimits, SandboxPolicy

    chosen = tuple(int(v) for v in versions.split(","))
    session = cgroups.CgroupSession
    cgroups.CgroupSession = lambda tag, **kw: session(tag, versions=chosen, **kw)  # type: ignore[assignment,misc]
    if name == "landlock":
        import dsh.runners.landlock.runner as module
        from dsh.runners.landlock import LandlockRunner

        module.CgroupSession = cgroups.CgroupSession  # type: ignore[misc]
        runner: object = LandlockRunner()
    else:
        import dsh.runners.bwrap.runner as bwrap_module
        from dsh.runners.bwrap import BwrapRunner

        bwrap_module.CgroupSession = cgroups.CgroupSession  # type: ignore[attr-defined]
        runner = BwrapRunner()
    fields = dict(item.split("=") for item in spec.split(",") if "=" in item)
    limits = ResourceLimits(**{k: float(v) if k == "wall_time_s" else int(v) for k, v in fields.items()})
    policy = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=Path(workspace), limits=limits,
                           accept_degraded=("landlock-process-list",))  # landlock has no pid namespace
    launch = runner.prepare(argv, policy, cwd=workspace, env=dict(os.environ))  # type: ignore[attr-defined]

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(launch.argv), pass_fds=launch.pass_fds, start_new_session=True,
                                stdin=subprocess.DEVNULL, env=launch.spawn_env)

    proc = launch.spawn_in(spawn) if launch.spawn_in is not None else spawn()
    print(proc.pid, flush=True)
    proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
