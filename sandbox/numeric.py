"""Every numeric input (CLI flags, profile TOML, composition config, tool
arguments) is checked here, so each one is refused the same way: a
``ConfigError`` naming the field and the accepted range.

Python parses ``inf``, ``nan`` and ``1e400`` as floats and TOML, YAML and
JSON (``Infinity``, ``NaN``) can all produce them; a comparison with ``nan``
is always false, so a plain ``value <= 0`` check lets it through and the
limit silently disappears.  Hence: finite first, then the range.
"""

from __future__ import annotations

import math

from dsh.sandbox.errors import ConfigError

#: A year: any wall time or timeout beyond it is a mistake, not a wish.
MAX_SECONDS = 366 * 24 * 3600
#: The kernel's PID_MAX_LIMIT: no host runs more processes than this.
MAX_PROCESSES = 4_194_304
#: 1 PiB: no memory or file-size limit above it limits anything.
MAX_BYTES = 2**50
#: Below these a limit does not constrain a command, it breaks every command
#: in ways that name no limit (a SIGKILL at start, "Cannot fork", a daemon
#: error, a timeout of 0 ms): a shell running one pipeline needs a few
#: processes and a few MiB, and timeouts are counted in milliseconds.
MIN_SECONDS = 0.001
MIN_PROCESSES = 4
MIN_MEMORY_BYTES = 16 * 2**20
#: Composition config numbers (milliseconds, byte counts, job counts): large
#: enough for any real value, small enough to stay exact in a float and an int64.
MAX_CONFIG_NUMBER = 2**53


class NumberError(ConfigError):
    """A number out of its accepted range; ``problem`` is the message without the field."""

    code = "NUMBER_INVALID"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _shown(value: object) -> str:
    return repr(value) if not isinstance(value, float) else f"{value:g}"


def human_seconds(s: float) -> str:
    """``1 ms``, ``5 min``, ``366 days``; a year and more in days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if s >= size:
            shown = figure(s / size)
            return f"{shown} day" if unit == "days" and shown == "1" else f"{shown} {unit}"
    return f"{figure(s * 1000)} ms" if s > 0 else f"{figure(s)} s"


def figure(x: float) -> str:
    """At most three significant digits below 1000, whole numbers above: no exponents."""
    return f"{x:.3g}" if x < 1000 else f"{round(x):,}"


def _number(field: str, value: object, accepted: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NumberError(field, f"must be {accepted}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise NumberError(field, f"must be {accepted}, got {_shown(value)}")
    return value


def seconds(field: str, value: object, *, low: float = MIN_SECONDS, high: float = MAX_SECONDS) -> float:
    """A finite duration in seconds in ``[low, high]`` (at least a millisecond:
    timeouts are counted in whole milliseconds)."""
    accepted = f"a number of seconds from {human_seconds(low)} to {human_seconds(high)}"
    number = _number(field, value, accepted)
    if not low <= number <= high:
        shown = _shown(number)
        if number > 0 and human_seconds(number) != f"{shown} s":
            shown += f" ({human_seconds(number)})"
        raise NumberError(field, f"must be {accepted}, got {shown}")
    return float(number)


def count(field: str, value: object, *, low: int = 1, high: int = MAX_PROCESSES) -> int:
    """A whole number in ``[low, high]`` (``5.0`` is accepted as 5)."""
    accepted = f"a whole number from {low} to {high}"
    number = _number(field, value, accepted)
    if isinstance(number, float):
        if not number.is_integer():
            raise NumberError(field, f"must be {accepted}, got {_shown(number)}")
        number = int(number)
    if not low <= number <= high:
        raise NumberError(field, f"must be {accepted}, got {number}")
    return number


def byte_count(field: str, value: object, *, low: int = 1, high: int = MAX_BYTES) -> int:
    """A size in bytes from ``low`` to ``high`` (already parsed from any unit)."""
    return count(field, value, low=low, high=high)


def processes(field: str, value: object) -> int:
    """A process limit: from ``MIN_PROCESSES`` to the kernel's maximum."""
    return count(field, value, low=MIN_PROCESSES)


def config_number(field: str, value: int | float) -> int | float:
    """A number in a composition entry's config: finite and in ``[0, 2**53]``.

    No provider takes a negative or an unbounded number; a per-field range is
    the provider's own business on top of this.
    """
    accepted = f"a finite number from 0 to {MAX_CONFIG_NUMBER}"
    number = _number(field, value, accepted)
    if not 0 <= number <= MAX_CONFIG_NUMBER:
        raise NumberError(field, f"must be {accepted}, got {_shown(number)}")
    return number
