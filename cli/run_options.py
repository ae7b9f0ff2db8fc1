"""``run``'s parsed command line, and the same with the configuration applied.

Apart from ``run.py`` so the settings layer, which fills these options from
the config files and ``DSH_SANDBOX_*``, never imports the command back.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunOptions:
    """The parsed command line of ``run`` (one place to add flags, e.g. ``--approval``)."""

    mode: str | None = None
    profile: str | None = None
    runner: str | None = None  # None: not given (the config files or "auto" decide)
    workspace: str | None = None
    workdir: str | None = None
    writable: tuple[str, ...] = ()
    force_writable: tuple[str, ...] = ()
    network: bool | None = None
    timeout_s: float | None = None
    as_json: bool = False
    composition: str | None = None
    command: str | None = None
    argv: tuple[str, ...] = ()
    approval: str | None = None  # deny | prompt | rules:FILE (escalation of a denied run)
    raw_output: bool = False  # copy escape sequences to a terminal as they are
    env: tuple[tuple[str, str], ...] = ()  # --env K=V, then the config files' [env]
    image: str | None = None  # --image: the docker runner's image
    accept_degraded: tuple[str, ...] = ()
    trust_project: bool = False  # the project config may weaken the sandbox
    runner_options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()  # from the config files
    user_config: str | None = None  # the user's config file, when one was read
    tty: bool | None = None  # -t/--no-tty; None: a pty when stdin and stdout are terminals


def apply_to_run(opts: RunOptions) -> RunOptions:
    """``run``'s options with the config files and ``DSH_SANDBOX_*`` applied under its flags."""
    # Imported here: a run from a composition file never reads the config files.
    from dsh.cli.settings import Flags, resolve

    flags = Flags(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(Flags)})
    settings = resolve(flags, os.environ, Path(opts.workspace or "."))
    options = settings.runner_options(os.environ)
    return dataclasses.replace(
        opts, profile=settings["profile"], mode=settings["mode"], runner=settings["runner"],
        approval=settings["approval"], network=settings["network"],
        accept_degraded=settings.accepted(), env=settings.env_pairs(),
        runner_options=tuple((name, tuple(values.items())) for name, values in options.items()),
        user_config=settings.user_real if settings.user_found else None,
    )
