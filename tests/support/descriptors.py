"""Tests that need more descriptors than a login session's soft limit (1,024)
raise it themselves, up to the hard limit, as a long-lived server would."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator

from tests.support.require import unavailable


@contextlib.contextmanager
def soft_nofile_at_least(needed: int) -> Iterator[None]:
    """RLIMIT_NOFILE's soft limit at least ``needed`` while the block runs; a
    hard limit below it skips (``SANDBOX_UNAVAILABLE``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        unavailable("descriptors", f"RLIMIT_NOFILE's hard limit is {hard}; raise it to {needed} or more")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
