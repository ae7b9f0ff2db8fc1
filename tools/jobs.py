"""``ctx.require(JobRegistry)``: ids, owners and lifetimes of the executions the tools start.

The shell seam's handles carry no id and no owner: the tools register
every execution here the moment it starts, so a foreground command that outlives
the tool's wait simply keeps running as the job it already is.  The registry
refuses one owner's id to another, reaps finished jobs after ``reap_after_s``,
caps how many jobs exist at once, and kills every job on teardown.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import ClassVar

from dsh.executors.seam import ProcessStatus, ShellExecution, ShellProcessRead
from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import ConfigError, DshError

log = logging.getLogger("dsh.tools")


class JobError(DshError):
    """A job request the caller got wrong; the message says what to do."""

    code = "JOB_ERROR"


class UnknownJobError(JobError):
    code = "JOB_NOT_FOUND"


class ForeignJobError(JobError):
    code = "JOB_FOREIGN"


class JobLimitError(JobError):
    code = "JOB_LIMIT"


class RegistryClosedError(JobError):
    code = "JOB_REGISTRY_CLOSED"


@dataclass(frozen=True)
class JobRegistryConfig:
    #: Most jobs that may exist at once (running, or finished and not reaped yet).
    max_jobs: int = 16
    #: Seconds a finished job stays readable before it is forgotten.
    reap_after_s: float = 600.0
    #: Seconds ``close()`` waits for each killed job to settle.
    close_wait_s: float = 30.0


class Job:
    """One registered execution.  Mutable only through the registry's lock."""

    def __init__(self, job_id: str, owner: str, command: str, execution: ShellExecution) -> None:
        self.id = job_id
        self.owner = owner
        self.command = command
        self.execution = execution
        self.started_at = time.time()
        #: Monotonic time the registry first saw the job settled.
        self.finished_seen: float | None = None

    @property
    def status(self) -> ProcessStatus:
        return self.execution.status


@dataclass(frozen=True)
class KillReport:
    job_id: str
    killed: bool  # False: it had already finished
    settled: bool  # True once the whole process group / sandbox is gone
    status: ProcessStatus
    exit_code: int | None
    signal: str | None


class JobRegistry(Service):
    """In-memory job registry (the ``jobs`` plugin)."""

    key: ClassVar[str] = "jobs"
    Config: ClassVar[type[JobRegistryConfig]] = JobRegistryConfig
    config: JobRegistryConfig

    def __init__(self, ctx: Context, config: JobRegistryConfig | None = None) -> None:
        super().__init__(ctx, config)
        if self.config.max_jobs < 1:
            raise ConfigError(f"jobs: max_jobs must be at least 1, got {self.config.max_jobs}")
        if self.config.reap_after_s < 0:
            raise ConfigError(f"jobs: reap_after_s must be >= 0, got {self.config.reap_after_s}")
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False

    # -- registration -----------------------------------------------------------
    def _full_message(self) -> str:
        return (
            f"too many jobs: {self.config.max_jobs} already exist (running, or finished and "
            "not yet reaped); stop one with job_kill or wait for running ones to finish"
        )

    def check_capacity(self) -> None:
        """Raise ``JobLimitError`` now if ``register`` would refuse (check before spawning)."""
        with self._lock:
            self._reap_locked()
            if self._closed:
                raise RegistryClosedError("the job registry is shut down; no new jobs")
            if len(self._jobs) >= self.config.max_jobs:
                raise JobLimitError(self._full_message())

    def register(self, execution: ShellExecution, owner: str, command: str) -> Job:
        """Give ``execution`` an id owned by ``owner``.  Past the cap: ``JobLimitError``
        (the caller still holds the execution and must kill it)."""
        with self._lock:
            self._reap_locked()
            if self._closed:
                raise RegistryClosedError("the job registry is shut down; no new jobs")
            if len(self._jobs) >= self.config.max_jobs:
                raise JobLimitError(self._full_message())
            job = Job(f"job-{next(self._ids)}", owner, command, execution)
            self._jobs[job.id] = job
            return job

    def release(self, job: Job) -> None:
        """Forget a settled job whose full result its caller already took."""
        with self._lock:
            if self._jobs.get(job.id) is job and job.execution.done:
                del self._jobs[job.id]

    # -- lookup -------------------------------------------------------------------
    def get(self, job_id: str, owner: str) -> Job:
        with self._lock:
            self._reap_locked()
            job = self._jobs.get(job_id)
        if job is None:
            raise UnknownJobError(
                f"no job {job_id!r}: it never existed, or it finished and was reaped "
                f"{self.config.reap_after_s:g}s later; start the command again if needed"
            )
        if job.owner != owner:
            raise ForeignJobError(
                f"job {job_id!r} belongs to another agent; you can only read or kill your own jobs"
            )
        return job

    def owned_by(self, owner: str) -> list[Job]:
        with self._lock:
            self._reap_locked()
            return [j for j in self._jobs.values() if j.owner == owner]

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    # -- operations -----------------------------------------------------------------
    def read(self, job_id: str, owner: str) -> tuple[Job, ShellProcessRead]:
        """New output since the last read (consuming) and the job's status."""
        job = self.get(job_id, owner)
        return job, job.execution.read_output()

    def wait(self, job_id: str, owner: str, timeout: float | None) -> bool:
        return self.get(job_id, owner).execution.wait(timeout)

    def kill(self, job_id: str, owner: str, *, wait_s: float = 30.0) -> KillReport:
        """Kill the job's whole process group / sandbox and wait (bounded) for it."""
        job = self.get(job_id, owner)
        killed = job.execution.kill()
        settled = job.execution.wait(wait_s)
        ex = job.execution
        return KillReport(job.id, killed, settled, ex.status, ex.exit_code, ex.signal)

    # -- lifetime -------------------------------------------------------------------
    def _reap_locked(self) -> None:
        now = time.monotonic()
        for job_id, job in list(self._jobs.items()):
            if job.finished_seen is None:
                if job.execution.done:
                    job.finished_seen = now
                else:
                    continue
            if now - job.finished_seen >= self.config.reap_after_s:
                del self._jobs[job_id]

    def reap(self) -> None:
        with self._lock:
            self._reap_locked()

    def close(self) -> None:
        """Kill every job (running or not) and wait for each to settle."""
        with self._lock:
            self._closed = True
            jobs = list(self._jobs.values())
            self._jobs.clear()
        for job in jobs:
            job.execution.kill()
        for job in jobs:
            job.execution.wait(self.config.close_wait_s)
        for job in jobs:
            _log_what_it_left(job)


def _log_what_it_left(job: Job) -> None:
    """What a job left that the host will trust (a repository it made, a
    hook), on the server's log: the client that started it is gone, or never
    read its end, and the host's next git must not be the first to know."""
    from dsh.tools.render import left_behind_notes

    if not job.execution.done:
        return
    facts = job.execution.result().sandbox
    if facts is None:
        return
    for line in left_behind_notes(facts.trusted_changed, facts.removed_from_git, facts.trusted_unsearched):
        log.warning("dsh-sandbox: background job %s (%s): %s", job.id, job.command[:200], line)
