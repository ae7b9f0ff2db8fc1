"""``FakeRunner``: a configurable test double of a runner (as httpx ships ``MockTransport``).

It enforces nothing.  It exists to test what sits above the runner seam (host
selection, the fail-closed gate, plugins, executors) without a kernel, and it
cannot be mistaken for a sandbox:

- it is not registered in this package's entry points and is never selected
  by ``runner=auto`` (``auto_priority`` is ``None`` unless a test sets one on
  its own instance), so it is only ever used when injected:
  ``SandboxHost(ctx, config, runners=[FakeRunner(...)])``;
- ``prepare`` never wraps anything: it records the argv and returns a canned
  result from a process that never started, or runs the argv unwrapped *only*
  for a ``danger-full-access`` policy (``on_run="host"``), which asks for no
  sandbox at all.
"""

from dsh.runners.fake.runner import FakeProcess, FakeRunner

__all__ = ["FakeProcess", "FakeRunner"]
