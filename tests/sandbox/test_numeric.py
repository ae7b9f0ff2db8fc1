"""Every numeric input goes through ``sandbox/numeric.py``: finite first, then
the range, and a refusal that names the field and the accepted range."""

from __future__ import annotations

import math

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.numeric import (
    MAX_BYTES,
    MAX_CONFIG_NUMBER,
    MAX_PROCESSES,
    MAX_SECONDS,
    MIN_PROCESSES,
    MIN_SECONDS,
    NumberError,
    byte_count,
    config_number,
    count,
    processes,
    seconds,
)

NOT_FINITE = [math.inf, -math.inf, math.nan, float("1e400")]
NOT_NUMBERS = [True, False, None, "5", b"5", [5], {"n": 5}]


@pytest.mark.parametrize("value", NOT_FINITE + NOT_NUMBERS)
@pytest.mark.parametrize("check", [seconds, count, byte_count, processes, config_number])
def test_non_finite_and_non_numbers_are_refused_by_every_check(check: object, value: object) -> None:
    with pytest.raises(NumberError) as caught:
        check("limits.x", value)  # type: ignore[operator]
    assert caught.value.field == "limits.x"
    assert str(caught.value).startswith("limits.x: must be ")
    assert caught.value.code == "NUMBER_INVALID"
    assert isinstance(caught.value, ConfigError)  # the CLI turns it into exit 2


def test_the_message_names_the_field_the_range_and_the_value() -> None:
    with pytest.raises(NumberError) as caught:
        seconds("--timeout", math.nan)
    problem = "must be a number of seconds from 1 ms to 366 days, got nan"  # human units, not 3.16224e+07
    assert (str(caught.value), caught.value.problem) == (f"--timeout: {problem}", problem)
    with pytest.raises(NumberError) as caught:
        seconds("--timeout", 1e9)
    assert caught.value.problem == "must be a number of seconds from 1 ms to 366 days, got 1e+09 (11,574 days)"
    with pytest.raises(NumberError) as caught:
        count("max_processes", 2.5)
    assert str(caught.value) == f"max_processes: must be a whole number from 1 to {MAX_PROCESSES}, got 2.5"
    with pytest.raises(NumberError) as caught:
        processes("max_processes", "4")
    assert str(caught.value) == (
        f"max_processes: must be a whole number from {MIN_PROCESSES} to {MAX_PROCESSES}, got '4'"
    )


def test_seconds_range() -> None:
    assert seconds("t", 1) == 1.0 and isinstance(seconds("t", 1), float)
    assert seconds("t", MIN_SECONDS) == MIN_SECONDS
    assert seconds("t", MAX_SECONDS) == MAX_SECONDS
    for bad in (0, -1, MIN_SECONDS / 2, MAX_SECONDS + 1):
        with pytest.raises(NumberError):
            seconds("t", bad)
    assert seconds("t", 0, low=0) == 0.0
    with pytest.raises(NumberError, match=r"from 0 s to 5 s, got 6$"):
        seconds("t", 6, low=0, high=5)


def test_count_takes_whole_floats_and_refuses_fractions() -> None:
    assert count("n", 5.0) == 5 and isinstance(count("n", 5.0), int)
    assert count("n", 1) == 1 and count("n", MAX_PROCESSES) == MAX_PROCESSES
    for bad in (0, -3, 5.5, MAX_PROCESSES + 1):
        with pytest.raises(NumberError):
            count("n", bad)
    assert count("n", 0, low=0, high=0) == 0


def test_processes_has_a_floor_that_lets_a_shell_run() -> None:
    assert processes("p", MIN_PROCESSES) == MIN_PROCESSES
    with pytest.raises(NumberError, match=f"from {MIN_PROCESSES} to"):
        processes("p", MIN_PROCESSES - 1)


def test_byte_count_range() -> None:
    assert byte_count("b", MAX_BYTES) == MAX_BYTES
    with pytest.raises(NumberError, match=f"from 1 to {MAX_BYTES}, got {MAX_BYTES + 1}"):
        byte_count("b", MAX_BYTES + 1)
    with pytest.raises(NumberError):
        byte_count("b", 0)


def test_config_number_is_finite_non_negative_and_exact() -> None:
    assert config_number("ms", 0) == 0
    assert config_number("ms", 1.5) == 1.5
    assert config_number("ms", MAX_CONFIG_NUMBER) == MAX_CONFIG_NUMBER
    for bad in (-1, -0.5, MAX_CONFIG_NUMBER + 1):
        with pytest.raises(NumberError, match=f"ms: must be a finite number from 0 to {MAX_CONFIG_NUMBER}"):
            config_number("ms", bad)
