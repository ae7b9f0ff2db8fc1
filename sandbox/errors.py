"""Errors of dsh-sandbox.  Every error class carries a stable ``code``.

User mistakes (bad profile, unknown runner, missing workspace) are ``UsageError``
subclasses: the CLI prints them without a traceback and exits 2.
"""

from __future__ import annotations


class DshError(Exception):
    """Base of every dsh-sandbox error; ``code`` is stable across versions."""

    code = "DSH_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(DshError):
    """The caller's input is wrong; the message names the input and the fix."""

    code = "USAGE_ERROR"


class ConfigError(UsageError):
    """A configuration value (composition entry, profile key, CLI flag) is invalid."""

    code = "CONFIG_ERROR"


class ConfigErrors(ConfigError):
    """Several values are invalid at once (every refused writable root):
    one message listing each, and ``errors`` for who wants them one by one."""

    code = "CONFIG_ERROR"

    def __init__(self, errors: tuple[ConfigError, ...]) -> None:
        super().__init__(f"{len(errors)} problems:\n  " + "\n  ".join(str(e) for e in errors))
        self.errors = errors


class CompositionError(ConfigError):
    """A composition entry cannot be built (unknown provider, bad config field)."""

    code = "COMPOSITION_ERROR"


class DuplicateServiceError(DshError):
    """A second provider was mounted for a service key that already has one."""

    code = "DUPLICATE_SERVICE"


class MissingServiceError(DshError):
    """A consumer asked the context for a service no provider was mounted for."""

    code = "MISSING_SERVICE"


class SandboxUnavailable(DshError):
    """A restricted mode cannot be enforced here; the command was not run.

    ``reason`` is what a person can act on (install bwrap, enable Landlock, start
    the Docker daemon...).  Never caught to fall back to an unsandboxed run.
    """

    code = "SANDBOX_UNAVAILABLE"

    def __init__(self, reason: str, *, runner: str | None = None, degradations: tuple[str, ...] = ()) -> None:
        prefix = f"{runner}: " if runner else ""
        super().__init__(f"SANDBOX_UNAVAILABLE: {prefix}{reason}")
        self.reason = reason
        self.runner = runner
        #: Degradation names that, accepted (``--accept-degraded NAME`` or a
        #: profile's ``accept_degraded``), would let the run go ahead.
        self.degradations = degradations


class SandboxChanged(SandboxUnavailable):
    """The host changed under a sandbox while it was set up (a path its plan
    masks was removed: another session of the user ended): nothing ran, and
    planning again from the host as it now is may succeed."""


class ExecutionError(DshError):
    """Infrastructure failure of an execution (missing workdir, missing shell)."""

    code = "EXECUTION_ERROR"


class WorkdirError(ExecutionError, UsageError):
    """The working directory is missing or not a directory."""

    code = "WORKDIR_INVALID"


class ShellNotFoundError(ExecutionError):
    """The shell binary (bash, pwsh) is not installed."""

    code = "SHELL_NOT_FOUND"


#: What a spawn that failed once the command had started says of it.
STARTED_AND_KILLED = "the command was killed as soon as it started, with nothing to watch it; it may have run in part"

#: What the kernel and Python say when a new process or thread is refused:
#: at the user's RLIMIT_NPROC most often, which they can act on.
_AT_PROCESS_LIMIT = ("Resource temporarily unavailable", "can't start new thread")


def process_limit_hint(error: str) -> str:
    """`` (...ulimit -u...)`` when ``error`` reads as a refused new process or
    thread, else ``""``: the errno alone names no cause a user can act on."""
    if any(sign in error for sign in _AT_PROCESS_LIMIT):
        return (" (no new process or thread could be made: this user's limit on processes and threads, "
                "ulimit -u, is likely reached; end some of them or raise it)")
    return ""
