"""A policy path swapped for a symlink while another run resolves it.

The command (the attacker) exchanges a directory in its writable area with a
symlink to a directory outside every root (``renameat2(RENAME_EXCHANGE)``),
again and again; meanwhile the host (the victim) starts sessions on the same
runner whose workspace is that directory and runs a command that writes into
the outside directory by its real path.  Every victim run must run inside its
roots or be refused cleanly: nothing may appear outside, nothing may crash.
In read-only mode the swaps fail and the victims simply run.

Both kinds of link: an absolute one, and a relative one, which a tool that
mounts by name follows for the source and the mount point alike (its own
identity check then passes once the directory is swapped back).
"""

from __future__ import annotations

import os
import time
import traceback

from dsh.cli.conformance.model import Expect, HostEnv, RunOutput, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
#: How long the host keeps starting victim runs while the command swaps.
RACE_SECONDS = 5.0

SWAP = (
    "import ctypes, os, select, time\n"
    "L = ctypes.CDLL(None, use_errno=True)\n"
    "L.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]\n"
    "a, b = b'{ws}/victim', b'{ws}/vlink'\n"
    "print('DSH-READY', flush=True)\n"
    "end = time.monotonic() + 120\n"
    "while not select.select([0], [], [], 0)[0] and time.monotonic() < end:\n"
    "    for _ in range(200):\n"
    "        L.renameat2(-100, a, -100, b, 2)\n"
    "if os.read(0, 8).startswith(b'go'): print('DSH-GO', flush=True)\n"
)


def _stage(env: HostEnv) -> None:
    (env.ws / "victim").mkdir(parents=True, exist_ok=True)
    (env.ws / "vlink").symlink_to(env.outside)
    env.extra["outside_before"] = sorted(p.name for p in env.outside.iterdir())


def _stage_relative(env: HostEnv) -> None:
    (env.ws / "victim").mkdir(parents=True, exist_ok=True)
    (env.ws / "vlink").symlink_to(os.path.relpath(env.outside, env.ws))
    env.extra["outside_before"] = sorted(p.name for p in env.outside.iterdir())


def _victims(env: HostEnv) -> None:
    """The host's runs, while the command swaps: one session each, so each
    resolves the workspace anew."""
    from dsh.executors.seam import ShellExecRequest, ShellExecutor
    from dsh.sandbox.errors import DshError
    from dsh.sandbox.session import SessionSpec, build_session

    race: dict[str, object] = {"ran": 0, "refused": 0, "errors": []}
    errors: list[str] = []
    deadline = time.monotonic() + RACE_SECONDS
    index = 0
    while index == 0 or time.monotonic() < deadline:
        index += 1
        spec = SessionSpec(
            mode="workspace-write", workspace=str(env.ws / "victim"), runner=env.runner or "auto",
            runner_options=env.runner_options, accept_degraded=env.accepted, executor="bash-sandbox",
        )
        target = env.outside / f"pwned-{env.nonce}-{index}"
        try:
            with build_session(spec) as ctx:
                shell = ctx.require(ShellExecutor)
                shell.execute(shell.resolve(ShellExecRequest(command=f"echo pwned > {target}",
                                                             timeout_ms=60_000))).result()
            race["ran"] = int(str(race["ran"])) + 1
        except DshError:
            race["refused"] = int(str(race["refused"])) + 1
        except Exception:  # what the CLI would print as a traceback
            errors.append(traceback.format_exc(limit=-2))
    race["errors"] = errors
    env.extra["race"] = race


def _nothing_outside(env: HostEnv, out: RunOutput) -> str | None:
    race = env.extra.get("race")
    if not isinstance(race, dict):
        return "the host's raced runs never started"
    problems = []
    new = sorted(set(p.name for p in env.outside.iterdir()) - set(env.extra["outside_before"]))
    if new:
        problems.append(f"raced runs wrote outside every root: {new[:5]} ({len(new)} entries; "
                        f"ran {race['ran']}, refused {race['refused']})")
    errors = race["errors"]
    if errors:
        problems.append(f"{len(errors)} raced run(s) died with a traceback, e.g. {errors[0][-400:]!r}")
    return "; ".join(problems) or None


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("pol-swapped-root-race", "policy",
             "a workspace swapped with a symlink while another run resolves it never redirects that run",
             ("python3", "-c", SWAP), BLOCKED, setup=_stage, during=_victims,
             check_blocked=_nothing_outside, requires=("python3",), timeout_ms=180_000),
    Scenario("pol-swapped-root-relative-race", "policy",
             "a workspace swapped with a relative symlink (followed alike for a mount's source and its "
             "mount point) while another run starts never redirects that run's writable bind",
             ("python3", "-c", SWAP), BLOCKED, setup=_stage_relative, during=_victims,
             check_blocked=_nothing_outside, requires=("python3",), timeout_ms=180_000),
)
