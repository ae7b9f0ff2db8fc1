"""Property tests of the retention library over random byte streams and cut points."""

from __future__ import annotations

import itertools

import pytest
from dsh.executors.retention import (
    ItemRetainer,
    Omitted,
    TextRetainer,
    format_retention_notice,
)
from hypothesis import given, settings
from hypothesis import strategies as st

STRATEGIES = ("head", "tail", "head_tail")


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _feed(retainer: TextRetainer, chunks: list[bytes]) -> int:
    """Feed chunks; return the most bytes held in memory at any point."""
    peak = 0
    for chunk in chunks:
        retainer.feed(chunk)
        peak = max(peak, retainer.held_bytes)
    return peak


def _check_exact(retainer: TextRetainer, data: bytes, max_bytes: int, peak: int) -> None:
    head, tail = retainer.retained()
    kept = len(head) + len(tail)
    omitted = retainer.omitted
    assert peak <= max_bytes  # bounded memory
    assert kept <= max_bytes
    assert retainer.total_bytes == len(data)
    assert retainer.total_lines == data.count(b"\n")
    # Exact counts: what is not kept is omitted, newline for newline.
    assert omitted.bytes == len(data) - kept
    assert omitted.lines == data.count(b"\n") - head.count(b"\n") - tail.count(b"\n")
    # Head is a prefix, tail a suffix, and they never overlap.
    assert data.startswith(head)
    assert data.endswith(tail)
    if omitted.bytes == 0:
        assert head + tail == data
    if retainer.strategy == "tail":
        assert head == b""
    if retainer.strategy == "head":
        assert tail == b""


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=600),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
    max_bytes=st.integers(min_value=0, max_value=120),
    strategy=st.sampled_from(STRATEGIES),
)
def test_random_bytes_exact_counts_and_bounded(data: bytes, cuts: list[int], max_bytes: int, strategy: str) -> None:
    retainer = TextRetainer(max_bytes, strategy)  # type: ignore[arg-type]
    peak = _feed(retainer, _chunks(data, cuts))
    _check_exact(retainer, data, max_bytes, peak)
    # Whatever the input, decoding the retained bytes gives the text.
    head, tail = retainer.retained()
    assert retainer.text() == (head + tail).decode("utf-8", errors="replace")


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=1200), max_size=12),
    max_bytes=st.integers(min_value=0, max_value=80),
    strategy=st.sampled_from(STRATEGIES),
)
def test_valid_utf8_never_broken_at_a_cut(text: str, cuts: list[int], max_bytes: int, strategy: str) -> None:
    data = text.encode("utf-8")
    retainer = TextRetainer(max_bytes, strategy)  # type: ignore[arg-type]
    peak = _feed(retainer, _chunks(data, cuts))
    _check_exact(retainer, data, max_bytes, peak)
    head, tail = retainer.retained()
    if not retainer.omitted:  # nothing cut: head and tail are one contiguous run
        head, tail = head + tail, b""
    # Each retained part is valid UTF-8 on its own: no cut split a code point.
    head_text = head.decode("utf-8")
    tail_text = tail.decode("utf-8")
    out = retainer.text()
    assert "\ufffd" not in out or "\ufffd" in text
    assert out == head_text + tail_text
    if strategy == "tail":
        assert text.endswith(out)
    elif strategy == "head":
        assert text.startswith(out)
    else:
        assert text.startswith(head_text) and text.endswith(tail_text)
    # Trimming never drops more than one split code point per cut.
    assert len(head) + len(tail) >= min(len(data), max_bytes) - 2 * 3


def test_head_tail_separator_only_when_bytes_were_omitted() -> None:
    retainer = TextRetainer(8, "head_tail")
    retainer.feed(b"abcdefgh")
    assert retainer.text(separator="|") == "abcdefgh"
    retainer.feed(b"ij")
    assert retainer.text(separator="|") == "abcd|ghij"
    assert retainer.omitted == Omitted(bytes=2, lines=0)


def test_cut_inside_a_four_byte_code_point_is_trimmed_and_counted() -> None:
    emoji = "😀".encode()  # 4 bytes
    retainer = TextRetainer(5, "tail")
    retainer.feed(b"a\n" + emoji + b"bcd")  # 9 bytes: the window starts 2 bytes into the emoji
    assert retainer.text() == "bcd"
    assert retainer.omitted == Omitted(bytes=6, lines=1)
    head = TextRetainer(4, "head")
    head.feed(b"ab" + emoji)
    assert head.text() == "ab"
    assert head.omitted.bytes == 4


def test_invalid_input_is_not_mistaken_for_a_cut() -> None:
    retainer = TextRetainer(4, "tail")
    retainer.feed(b"\x80\x80\x80\x80\x80\x80")  # only continuation bytes: invalid input
    assert retainer.retained() == (b"", b"\x80\x80\x80\x80")
    assert retainer.text() == "\ufffd" * 4


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="strategy"):
        TextRetainer(10, "middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        TextRetainer(-1)
    with pytest.raises(ValueError, match="max_items"):
        ItemRetainer[int](-1)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.integers()), max_items=st.integers(min_value=0, max_value=20))
def test_item_retainer_head(items: list[int], max_items: int) -> None:
    retainer: ItemRetainer[int] = ItemRetainer(max_items)
    kept = [retainer.add(item) for item in items]
    assert retainer.items == items[:max_items]
    assert retainer.omitted == Omitted(items=max(0, len(items) - max_items))
    assert retainer.total == len(items)
    assert kept == [i < max_items for i in range(len(items))]


def test_format_retention_notice() -> None:
    assert format_retention_notice(Omitted()) == ""
    assert (
        format_retention_notice(Omitted(bytes=120, lines=3), spill_path="/tmp/x.log")
        == "[output truncated: 120 bytes (3 lines) omitted from the start; full output: /tmp/x.log]"
    )
    assert (
        format_retention_notice(Omitted(items=1), what="matches", strategy="head")
        == "[matches truncated: 1 item omitted from the end]"
    )
