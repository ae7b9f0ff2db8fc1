"""Output retention: bounded retainers for byte streams and item streams.

A plain library: no context, no registration, no
events.  ``TextRetainer`` keeps a bounded part of a byte stream (head, tail or
head+tail) and trims incomplete UTF-8 code points at every cut, so the text it
returns never carries a replacement character that the cut itself introduced.
``ItemRetainer`` caps a stream of logical items.  Both report exact ``Omitted``
counts; ``format_retention_notice`` turns them into the standard footer.

Counting rules (exact, and what the property tests check):

- ``Omitted.bytes`` is the number of input bytes not represented in the
  retained bytes, including the bytes of a code point trimmed at a cut.
- ``Omitted.lines`` is the number of newline bytes (``\\n``) among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

TextStrategy = Literal["head", "tail", "head_tail"]
T = TypeVar("T")

_MAX_CONTINUATION = 3  # a UTF-8 sequence has at most 3 continuation bytes


@dataclass(frozen=True)
class Omitted:
    """What a retainer dropped: exact counts."""

    bytes: int = 0
    lines: int = 0
    items: int = 0

    def __bool__(self) -> bool:
        return bool(self.bytes or self.lines or self.items)


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _sequence_length(lead: int) -> int:
    """Length a UTF-8 lead byte announces (1 for ASCII or an invalid lead)."""
    if lead >= 0xF0 and lead <= 0xF7:
        return 4
    if lead >= 0xE0:
        return 3 if lead <= 0xEF else 1
    if lead >= 0xC0:
        return 2
    return 1


def trim_leading_partial(data: bytes | bytearray) -> int:
    """How many bytes to drop at the start of a suffix cut mid code point.

    Only continuation bytes are dropped, at most three: a longer run is not a
    code point the cut split, it is the input's own invalid data.
    """
    n = 0
    while n < min(len(data), _MAX_CONTINUATION) and _is_continuation(data[n]):
        n += 1
    if n == len(data) or not _is_continuation(data[n]):
        return n
    return 0  # 4+ continuation bytes in a row: invalid input, keep it as is


def trim_trailing_partial(data: bytes | bytearray) -> int:
    """How many bytes to drop at the end of a prefix cut mid code point."""
    end = len(data)
    for back in range(1, min(end, _MAX_CONTINUATION + 1) + 1):
        byte = data[end - back]
        if _is_continuation(byte):
            continue
        if byte >= 0xC0 and _sequence_length(byte) > back:
            return back  # a lead byte whose sequence the cut split
        return 0
    return 0


class TextRetainer:
    """Keeps a bounded part of a byte stream and decodes it as UTF-8.

    ``max_bytes`` bounds the retained bytes; memory held is at most
    ``max_bytes`` (plus the chunk being fed).  With ``head_tail`` the budget is
    split: ``head_bytes`` (default half) for the head, the rest for the tail.
    """

    def __init__(
        self,
        max_bytes: int,
        strategy: TextStrategy = "tail",
        *,
        head_bytes: int | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        if strategy not in ("head", "tail", "head_tail"):
            raise ValueError(f"unknown retention strategy {strategy!r}; use head, tail or head_tail")
        self.max_bytes = max_bytes
        self.strategy: TextStrategy = strategy
        if strategy == "head":
            self._head_cap = max_bytes
        elif strategy == "tail":
            self._head_cap = 0
        else:
            self._head_cap = max_bytes // 2 if head_bytes is None else min(head_bytes, max_bytes)
        self._tail_cap = max_bytes - self._head_cap if strategy != "head" else 0
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self._total_lines = 0
        self._dropped = 0  # bytes dropped between head and tail
        self._dropped_lines = 0

    # -- feeding ------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if not len(data):
            return
        chunk = memoryview(data).cast("B")
        self._total += len(chunk)
        self._total_lines += _count_newlines(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if not len(chunk):
            return
        if self._tail_cap == 0:
            self._drop(chunk)
            return
        if len(chunk) >= self._tail_cap:
            self._drop(self._tail)
            self._drop(chunk[: len(chunk) - self._tail_cap])
            self._tail = bytearray(chunk[len(chunk) - self._tail_cap :])
            return
        self._tail += chunk
        excess = len(self._tail) - self._tail_cap
        if excess > 0:
            self._drop(memoryview(self._tail)[:excess])
            del self._tail[:excess]

    def _drop(self, data: bytes | bytearray | memoryview) -> None:
        self._dropped += len(data)
        self._dropped_lines += _count_newlines(data)

    # -- reading ------------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        return self._total

    @property
    def total_lines(self) -> int:
        """Newline bytes seen in the whole stream."""
        return self._total_lines

    @property
    def held_bytes(self) -> int:
        """Bytes held in memory now (the bound the property tests check)."""
        return len(self._head) + len(self._tail)

    def _cut(self) -> tuple[bytes, bytes, int, int]:
        """Head and tail bytes after trimming split code points at each cut,
        plus the bytes and newlines trimmed."""
        head = bytes(self._head)
        tail = bytes(self._tail)
        trimmed = b""
        if self._dropped or (self.strategy == "head" and self._total > len(head)):
            # The head ends at a cut: drop a split code point at its end.
            cut = trim_trailing_partial(head)
            if cut:
                trimmed += head[-cut:]
                head = head[:-cut]
        if self._dropped and tail:
            # The tail starts at a cut.
            cut = trim_leading_partial(tail)
            trimmed += tail[:cut]
            tail = tail[cut:]
        return head, tail, len(trimmed), trimmed.count(b"\n")

    def retained(self) -> tuple[bytes, bytes]:
        """The retained head and tail bytes (either may be empty)."""
        head, tail, _, _ = self._cut()
        return head, tail

    def text(self, separator: str = "") -> str:
        """The retained text; ``separator`` goes between head and tail when
        bytes were omitted between them (head_tail only)."""
        head, tail, _, _ = self._cut()
        if self.strategy == "head_tail" and self._dropped and head and tail:
            return _decode(head) + separator + _decode(tail)
        return _decode(head + tail)

    @property
    def omitted(self) -> Omitted:
        _, _, trimmed, trimmed_lines = self._cut()
        return Omitted(bytes=self._dropped + trimmed, lines=self._dropped_lines + trimmed_lines)

    def window(self) -> tuple[int, bytes]:
        """Tail strategy: ``(offset, data)``, the raw retained suffix and the
        stream offset of its first byte (for offset readers)."""
        if self.strategy != "tail":
            raise ValueError("window() is only defined for the tail strategy")
        return self._total - len(self._tail), bytes(self._tail)


def _count_newlines(data: bytes | bytearray | memoryview) -> int:
    if isinstance(data, memoryview):
        return data.tobytes().count(b"\n") if len(data) else 0
    return data.count(b"\n")


def _decode(data: bytes) -> str:
    # Invalid bytes in the input itself are shown as U+FFFD; the cuts never add any.
    return data.decode("utf-8", errors="replace")


class ItemRetainer(Generic[T]):
    """Keeps the first ``max_items`` items of a stream (head strategy)."""

    def __init__(self, max_items: int) -> None:
        if max_items < 0:
            raise ValueError(f"max_items must be >= 0, got {max_items}")
        self.max_items = max_items
        self._items: list[T] = []
        self._omitted = 0

    def add(self, item: T) -> bool:
        """Offer one item; True if it was kept."""
        if len(self._items) < self.max_items:
            self._items.append(item)
            return True
        self._omitted += 1
        return False

    def extend(self, items: list[T] | tuple[T, ...]) -> None:
        for item in items:
            self.add(item)

    @property
    def items(self) -> list[T]:
        return list(self._items)

    @property
    def total(self) -> int:
        return len(self._items) + self._omitted

    @property
    def omitted(self) -> Omitted:
        return Omitted(items=self._omitted)


def format_retention_notice(
    omitted: Omitted,
    *,
    what: str = "output",
    strategy: TextStrategy = "tail",
    spill_path: str | None = None,
) -> str:
    """The standard footer, e.g. ``[output truncated: 120 bytes (3 lines)
    omitted from the start; full output: /tmp/x]``; empty when nothing was
    omitted.  Tool-specific recovery hints stay in the tools."""
    if not omitted:
        return ""
    parts: list[str] = []
    if omitted.items:
        parts.append(f"{omitted.items} item{'s' if omitted.items != 1 else ''}")
    if omitted.bytes:
        lines = f" ({omitted.lines} line{'s' if omitted.lines != 1 else ''})" if omitted.lines else ""
        parts.append(f"{omitted.bytes} byte{'s' if omitted.bytes != 1 else ''}{lines}")
    where = {"tail": "from the start", "head": "from the end", "head_tail": "from the middle"}[strategy]
    notice = f"[{what} truncated: {', '.join(parts)} omitted {where}"
    if spill_path:
        notice += f"; full {what}: {spill_path}"
    return notice + "]"
