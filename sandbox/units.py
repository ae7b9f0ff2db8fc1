"""Numbers in the units a person reads: ``16 MiB``, ``366 days``, never ``3.16224e+07``."""

from __future__ import annotations

import math

from dsh.sandbox.numeric import MAX_BYTES, MAX_SECONDS, MIN_MEMORY_BYTES, MIN_SECONDS


def human_bytes(n: float) -> str:
    """``16 MiB``, ``1 PiB``, ``1.5 GiB``, ``512 bytes``."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{_figure(n / size)} {unit}"
    return f"{_figure(n)} byte" + ("" if n == 1 else "s")


def human_seconds(s: float) -> str:
    """``1 ms``, ``5 min``, ``366 days``; a year and more in days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if s >= size:
            return f"{_figure(s / size)} {unit}"
    return f"{_figure(s * 1000)} ms"


def _figure(x: float) -> str:
    """At most three significant digits below 1000, whole numbers above: no exponents."""
    return f"{x:.3g}" if x < 1000 else f"{round(x):,}"


def limit_range_problem(key: str, value: object) -> str | None:
    """The range of limit ``key`` in units a person reads, with the value given."""
    if key == "wall_time_s":
        accepted = f"a number of seconds from {human_seconds(MIN_SECONDS)} to {human_seconds(MAX_SECONDS)}"
        shown = value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            shown = f"{value!r} ({human_seconds(value)})"
        return f"must be {accepted}, got {shown}"
    if key in ("max_memory", "max_file_size"):
        low = MIN_MEMORY_BYTES if key == "max_memory" else 1
        accepted = f"a size from {human_bytes(low)} to {human_bytes(MAX_BYTES)}"
        return f"must be {accepted}, got {value!r}"
    return None
