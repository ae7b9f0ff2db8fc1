"""Numbers in the units a person reads: ``16 MiB``, ``366 days``, never ``3.16224e+07``
(durations are formatted in ``numeric``, which checks them)."""

from __future__ import annotations

import math

from dsh.sandbox.numeric import MAX_BYTES, MAX_SECONDS, MIN_MEMORY_BYTES, MIN_SECONDS, human_seconds
from dsh.sandbox.numeric import figure as _figure


def human_bytes(n: float) -> str:
    """``16 MiB``, ``1 PiB``, ``1.5 GiB``, ``512 bytes``."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{_figure(n / size)} {unit}"
    return f"{_figure(n)} byte" + ("" if n == 1 else "s")




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
