"""Overlapping path rules, shared by the bwrap and docker tests.

Two directories, ``ws/a`` (with file ``g``) and ``ws/a/b`` (with file ``f``),
get two rules among hidden (H), protected (P), read-only (R) and writable root
(W): nested either way or on the same path, the inner one existing or not.
The expected outcome follows one model: a hidden path hides everything at and
below it, whatever else applies; otherwise the deepest rule wins, and on the
same path a read-only rule beats a writable one.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

KINDS = ("H", "P", "R", "W")
SECRET = "SECRET-CONTENT"


@dataclass(frozen=True)
class Case:
    outer: str  # rule on ws/a ("" for none)
    inner: str  # rule on ws/a/b ("" for none); both set and equal place means same path
    same_path: bool = False
    inner_missing: bool = False

    @property
    def id(self) -> str:
        if self.same_path:
            return f"{self.outer}+{self.inner}-same"
        return f"{self.outer}-outer-{self.inner}-inner" + ("-missing" if self.inner_missing else "")


def cases() -> list[Case]:
    nested = [Case(o, i) for o, i in itertools.permutations(KINDS, 2)]
    missing = [Case(o, i, inner_missing=True) for o, i in itertools.permutations(KINDS, 2)]
    same = [Case(a, b, same_path=True) for a, b in itertools.combinations(KINDS, 2)]
    return [*nested, *missing, *same]


def effective(case: Case) -> list[tuple[str, int]]:
    """(kind, depth) of each rule that applies; a missing inner hidden or writable path is no rule."""
    out = [(case.outer, 1)]
    if case.same_path:
        out.append((case.inner, 1))
    elif case.inner_missing and case.inner in ("H", "W"):
        pass
    else:
        out.append((case.inner, 2))
    return out


def expected(case: Case, target_depth: int) -> str:
    """``hidden``, ``ro`` or ``rw`` for the file at depth 1 (``a/g``) or 2 (``a/b/f``)."""
    covering = [(k, d) for k, d in effective(case) if d <= target_depth]
    if any(k == "H" for k, _ in covering):
        return "hidden"
    if not covering:
        return "rw"  # the workspace itself is writable
    deepest = max(d for _, d in covering)
    kinds = {k for k, d in covering if d == deepest}
    return "rw" if kinds == {"W"} else "ro"


def make_tree(ws: Path, case: Case) -> tuple[Path, Path]:
    outer, inner = ws / "a", ws / "a" / "b"
    outer.mkdir()
    (outer / "g").write_text(SECRET + "\n")
    if not case.inner_missing:
        inner.mkdir()
        (inner / "f").write_text(SECRET + "\n")
    return outer, inner


def apply(base: SandboxPolicy, case: Case, outer: Path, inner: Path) -> SandboxPolicy:
    where = {"outer": outer, "inner": outer if case.same_path else inner}
    rules: dict[str, list[Path]] = {k: [] for k in KINDS}
    rules[case.outer].append(where["outer"])
    rules[case.inner].append(where["inner"])
    if case.inner_missing:
        rules["H"] = [p for p in rules["H"] if p.exists()]  # the policy service drops missing hidden paths
    return dataclasses.replace(
        base,
        mode=SandboxMode.WORKSPACE_WRITE,
        writable_roots=(*base.writable_roots, *rules["W"]),
        protected_paths=(*base.protected_paths, *rules["P"]),
        read_only_paths=(*base.read_only_paths, *rules["R"]),
        hidden_paths=(*base.hidden_paths, *rules["H"]),
    )


#: Reads, appends to and creates beside each target; prints what it could read.
SCRIPT = """
for d in a a/b; do
  cat "$d/g" "$d/f" 2>/dev/null
  [ -f "$d/g" ] && echo PWNED >> "$d/g" 2>/dev/null
  [ -f "$d/f" ] && echo PWNED >> "$d/f" 2>/dev/null
  mkdir -p "$d" 2>/dev/null; echo NEW > "$d/new" 2>/dev/null
done
exit 0
"""


def check_host(case: Case, outer: Path, inner: Path, stdout: str) -> list[str]:
    """What differs from the model, judged from the host after the run."""
    problems: list[str] = []
    for depth, directory, name in ((1, outer, "g"), (2, inner, "f")):
        want = expected(case, depth)
        existed = depth == 1 or not case.inner_missing
        if existed:
            content = (directory / name).read_text()
            if want == "rw" and "PWNED" not in content:
                problems.append(f"{directory}/{name} should be writable")
            if want != "rw" and content != SECRET + "\n":
                problems.append(f"{directory}/{name} was written ({want})")
        made = (directory / "new").exists()
        if made != (want == "rw"):
            problems.append(f"{directory}/new {'created' if made else 'not created'} ({want})")
    readable = stdout.count(SECRET)
    visible = sum(
        1
        for depth in (1, 2)
        if expected(case, depth) != "hidden" and (depth == 1 or not case.inner_missing)
    )
    if readable != visible:
        problems.append(f"{readable} secret files read, {visible} expected visible")
    return problems
