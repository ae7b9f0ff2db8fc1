"""``run``'s parsed command line: checked before anything is built or run, and
the same with the configuration applied.

Apart from ``run.py`` so the settings layer, which fills these options from
the config files and ``DSH_SANDBOX_*``, never imports the command back.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.sandbox.errors import UsageError
from dsh.sandbox.modes import SandboxMode

#: How long a container-like sandbox stays warm after a run for the next run
#: of the same workspace and policy, unless ``--keep-warm`` says otherwise.
DEFAULT_KEEP_WARM_S = 600.0
KEEP_WARM_ENV = "DSH_SANDBOX_KEEP_WARM"


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
    #: Where ``network`` came from when not from this command line ("env ...", "FILE:LINE"); None: the flag.
    network_source: str | None = None
    allow_domain: tuple[str, ...] = ()  # --allow-domain: narrow the network to these hosts
    deny_domain: tuple[str, ...] = ()
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
    keep_warm_s: float | None = None  # --keep-warm; None: DEFAULT_KEEP_WARM_S; 0: removed at exit
    keep_warm_env: bool = False  # keep_warm_s came from DSH_SANDBOX_KEEP_WARM, not the flag


def keep_warm(opts: RunOptions) -> float | None:
    """The session's ``keep_warm_s``: None keeps nothing."""
    keep = DEFAULT_KEEP_WARM_S if opts.keep_warm_s is None else opts.keep_warm_s
    return keep or None


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
        # Set on this command line (the flag): chosen for this run, no source to name.
        network_source=None if opts.network is not None or settings["network"] is None
        else settings.values["network"].source,
        accept_degraded=settings.accepted(), env=settings.env_pairs(),
        runner_options=tuple((name, tuple(values.items())) for name, values in options.items()),
        user_config=settings.user_real if settings.user_found else None,
    )


# -- validation (before anything is built or run) ---------------------------------------
def check_options(opts: RunOptions) -> None:
    """Raise ``UsageError`` naming the input and the fix; nothing has run yet."""
    if opts.command is not None and opts.argv:
        raise UsageError(
            "-c STRING and ARGV conflict: pass either -c 'COMMAND' or -- PROGRAM ARGS..., not both"
        )
    if opts.command is None and not opts.argv:
        raise UsageError("empty command: pass -- PROGRAM ARGS... or -c 'COMMAND'")
    if opts.command is not None and not opts.command.strip():
        raise UsageError("-c: the command string is empty; pass the command to run")
    if opts.argv and not opts.argv[0]:
        raise UsageError("ARGV: the program name is an empty string; pass the program to run")
    check_session_options(opts)


def check_session_options(opts: RunOptions) -> None:
    """The checks of every flag but the command (``hook`` has no command of its own)."""
    _check_paths(opts)
    if opts.tty and opts.as_json:
        raise UsageError("-t and --json conflict: a terminal session is shown live; drop one of them")
    if opts.tty and not (os.isatty(0) and os.isatty(1)):
        raise UsageError("-t and the shell command need a terminal on stdin and stdout: run them in "
                         "a terminal, or use run --no-tty")
    if opts.timeout_s is not None:
        from dsh.sandbox.numeric import seconds

        seconds("--timeout", opts.timeout_s)
    if opts.keep_warm_s:  # 0 keeps nothing
        from dsh.sandbox.host import KEEP_WARM_MAX_S
        from dsh.sandbox.numeric import seconds

        source = f"{KEEP_WARM_ENV} (the --keep-warm default)" if opts.keep_warm_env else "--keep-warm"
        seconds(f"{source} (0 removes the container at exit)", opts.keep_warm_s, high=KEEP_WARM_MAX_S)
    if opts.composition is not None:
        clashing = [
            flag
            for flag, value in (
                ("--mode", opts.mode),
                ("--profile", opts.profile),
                ("--runner", None if opts.runner in (None, "auto") else opts.runner),
                ("--workspace", opts.workspace),
                ("--writable", opts.writable or None),
                ("--force-writable", opts.force_writable or None),
                ("--network/--no-network", opts.network),
                ("--allow-domain", opts.allow_domain or None),
                ("--deny-domain", opts.deny_domain or None),
                ("--env", opts.env or None),
                ("--image", opts.image),
                ("--accept-degraded", opts.accept_degraded or None),
                ("--trust-project", opts.trust_project or None),
            )
            if value is not None
        ]
        if clashing:
            raise UsageError(
                f"--composition conflicts with {', '.join(clashing)}: the composition file "
                "configures the policy and the runner; set them there or drop --composition"
            )
    if opts.mode is not None:
        SandboxMode.parse(opts.mode, field="--mode")
    if opts.approval is not None:
        from dsh.sandbox.approval import approval_option

        approval_option(opts.approval)
        if opts.approval == "elicit":
            raise UsageError("--approval elicit: only dsh-sandbox mcp has a client to ask; "
                             "use deny, prompt or rules:FILE here")
    if opts.runner not in (None, "auto"):
        from dsh.sandbox.registry import check_runner_name

        try:
            check_runner_name(opts.runner)
        except UsageError as exc:
            raise UsageError(f"--{exc}") from None


def _check_paths(opts: RunOptions) -> None:
    """An empty path would silently mean the current directory."""
    flags: list[tuple[str, tuple[str, ...]]] = [
        ("--workspace", () if opts.workspace is None else (opts.workspace,)),
        ("--workdir", () if opts.workdir is None else (opts.workdir,)),
        ("--writable", opts.writable),
        ("--force-writable", opts.force_writable),
        ("--composition", () if opts.composition is None else (opts.composition,)),
    ]
    from dsh.sandbox.input_files import path_problem

    for flag, values in flags:
        if any(not value.strip() for value in values):
            raise UsageError(f"{flag}: empty path; pass a path (\".\" for the current directory) or drop the flag")
        for value in values:
            problem = path_problem(value)
            if problem is not None:
                raise UsageError(f"{flag}: {problem}; pass a shorter path")
    from dsh.cli.settings import check_environment

    check_environment(os.environ)
