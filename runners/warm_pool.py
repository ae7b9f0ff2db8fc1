"""Warm sandboxes kept per policy shape (docker's containers, gVisor's sandboxes):
which one is current, and when the others go.

A sandbox of another shape keeps its mounts (a root the new policy dropped
stays writable there), whatever was left running in it, and what holds its
sources open: it is removed as soon as no command runs in it, at once if none
does, else when its last one ends (the runner's own ``ended`` path).  A long
session whose policy keeps changing (a repository appears, a root is added)
so holds one sandbox, not one per shape it ever had.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar


class Pooled(Protocol):
    stale: bool

    def reserve(self) -> None: ...

    def idle(self) -> bool: ...


W = TypeVar("W", bound=Pooled)


def make_current(warm: W, pool: Iterable[W], lock: threading.Lock, discard: Callable[[W], None]) -> W:
    """``warm`` is the sandbox the next command uses (one command reserved for
    it); every other one in ``pool`` (a live view, read under ``lock``) is
    stale, and the idle ones are discarded."""
    warm.reserve()
    with lock:
        warm.stale = False
        others = [w for w in pool if w is not warm]
        for other in others:
            other.stale = True
    for other in others:
        if other.idle():
            discard(other)
    return warm
