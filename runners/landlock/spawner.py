"""The restricted spawner thread.

Landlock (``landlock_restrict_self``), ``no_new_privs`` and a seccomp filter
installed by ``prctl`` bind to the *calling thread* and are inherited by every
process it forks.  A dedicated thread per policy applies them once, then runs
spawn callables (``subprocess.Popen(...)``) handed to it: the children are born
restricted, the rest of the interpreter is not.  No interpreter re-exec per
command: a spawn costs one thread hand-off.

The thread must outlive its children (a child's ``PR_SET_PDEATHSIG`` fires when
the *thread* that forked it exits), so it lives until the runner closes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from dsh.runners.landlock.abi import set_thread_name

T = TypeVar("T")
_Job = tuple[Callable[[], Any], "Future[Any]"]


class SpawnerError(Exception):
    """The thread could not restrict itself; ``__cause__`` says why."""


class SpawnerThread:
    """A thread that runs ``setup`` once, then every callable given to ``call``."""

    def __init__(self, name: str, setup: Callable[[], None] | None) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._ready: Future[int] = Future()
        self._setup = setup
        self._stopped = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        try:
            self.tid = self._ready.result()
        except BaseException as exc:
            self._thread.join()
            raise SpawnerError(str(exc)) from exc

    def _main(self) -> None:
        set_thread_name("dsh-landlock")  # visible in ps/top: which threads are restricted
        try:
            if self._setup is not None:
                self._setup()
        except BaseException as exc:  # the thread is unusable; it ends here
            self._ready.set_exception(exc)
            return
        self._ready.set_result(threading.get_native_id())
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
            del fn, future, job  # drop references before blocking again

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the restricted thread; return its result or re-raise."""
        if threading.get_native_id() == self.tid:
            return fn()  # already there (re-entrant call): a hand-off would deadlock
        if self._stopped or not self._thread.is_alive():
            raise SpawnerError("the restricted spawner thread has stopped (runner closed)")
        future: Future[T] = Future()
        self._jobs.put((fn, future))
        return future.result()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped = True
        self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
