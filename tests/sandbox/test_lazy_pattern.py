"""Module-level regular expressions are compiled at their first use, not at
import: every CLI call imports the modules of its path and meets few of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dsh.sandbox.lazy_pattern import LazyPattern

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "sandbox", "executors", "tools", "runners", "profiles")


def test_a_lazy_pattern_compiles_at_first_use_and_answers_as_re_does() -> None:
    text = r"(?P<word>[a-z]+)-(\d+)"
    lazy = LazyPattern(text, re.IGNORECASE)
    assert lazy._compiled is None  # nothing compiled yet
    real = re.compile(text, re.IGNORECASE)
    sample = "Alpha-1 beta-22 GAMMA-333"
    assert lazy.match(sample) is not None and lazy.match(sample).group(0) == real.match(sample).group(0)  # type: ignore[union-attr]
    assert lazy.compiled is lazy.compiled
    assert lazy.search(sample, 3).span() == real.search(sample, 3).span()  # type: ignore[union-attr]
    assert lazy.fullmatch("x-1") is not None and lazy.fullmatch("x-1 ") is None
    assert lazy.findall(sample) == real.findall(sample)
    assert [m.span() for m in lazy.finditer(sample)] == [m.span() for m in real.finditer(sample)]
    assert lazy.sub("_", sample) == real.sub("_", sample)
    assert lazy.split(sample, 1) == real.split(sample, 1)
    assert lazy.pattern == text and lazy.flags == re.IGNORECASE
    raw = LazyPattern(rb"\x1b\[[0-9;]*m")
    assert raw.sub(b"", b"\x1b[1mbold\x1b[0m") == b"bold"


def test_no_module_compiles_a_regular_expression_at_import() -> None:
    """A module-level ``re.compile`` is paid by every call that imports the
    module; ``LazyPattern`` defers it to the first use."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:  # module level only: a function compiles when called
                for call in ast.walk(node) if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr)) else ():
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr == "compile" and isinstance(call.func.value, ast.Name)
                            and call.func.value.id == "re"):
                        found.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert found == [], f"compiled at import (use LazyPattern): {found}"
