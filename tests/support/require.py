"""What a test needs from this host, and what CI requires of it.

A test that needs something this host lacks skips with a ``SANDBOX_UNAVAILABLE``
reason, unless ``DSH_REQUIRE`` names it: then the test fails, so something CI
has can never pass by skipping.  ``DSH_REQUIRE`` is a comma-separated list of
runner names (``landlock``, ``bwrap``, ``docker``, ``e2b``) and features:

- ``cgroup``: a cgroup this process can create children in (delegated, or as
  root), with the controllers the limit tests use (pids, memory);
- ``cgroup-v1`` / ``cgroup-v2``: the same in a hierarchy of that version.

``DSH_REQUIRE_RUNNERS``, the older name of the list, is read as well.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import NoReturn

import pytest
from dsh.runners.linux.cgroups import CgroupSession
from dsh.sandbox.runner import Runner, RunnerProbe

REQUIRE_VARS = ("DSH_REQUIRE", "DSH_REQUIRE_RUNNERS")
RUNNER_GROUP = "dsh_sandbox.runners"


def required() -> set[str]:
    """Every runner and feature the environment requires."""
    names = ",".join(os.environ.get(var, "") for var in REQUIRE_VARS)
    return {name.strip() for name in names.split(",") if name.strip()}


def unavailable(name: str, reason: str) -> NoReturn:
    """Skip for want of ``name``, or fail when ``DSH_REQUIRE`` requires it."""
    message = f"SANDBOX_UNAVAILABLE: {name}: {reason}"
    if name in required():
        pytest.fail(f"{message} (required by DSH_REQUIRE)")
    pytest.skip(message)


def load_runner_class(name: str) -> type[Runner]:
    for ep in metadata.entry_points(group=RUNNER_GROUP):
        if ep.name == name:
            cls: type[Runner] = ep.load()
            return cls
    raise LookupError(f"no runner named {name!r} is registered")


def require_runner(name: str, runner: Runner | None = None) -> RunnerProbe:
    """Probe ``name`` (or the given instance of it); unavailable unless it works."""
    instance = runner if runner is not None else load_runner_class(name)()
    probe = instance.probe()
    if not probe.available:
        unavailable(name, probe.reason or "the probe failed")
    return probe


def need_cgroup(*controllers: str, versions: tuple[int, ...] = (1, 2)) -> None:
    """Unavailable unless this process can create cgroups (of ``versions``) with ``controllers``."""
    feature = f"cgroup-v{versions[0]}" if len(versions) == 1 else "cgroup"
    session = CgroupSession("dsh-test-probe", versions=versions, keeper=False)
    try:
        if not session.holds:
            unavailable(feature, "no cgroup this process can create children in (delegate one, or run as root)")
        missing = [c for c in controllers if session.version_of(c) is None]
        if missing:
            unavailable(feature, f"no writable {'/'.join(missing)} controller in this process's cgroup")
    finally:
        session.close()
