"""A small SBPL reader for structural checks: forms, strings, regex literals, comments."""

from __future__ import annotations

from dataclasses import dataclass

Form = list["Form | Atom"]


@dataclass(frozen=True)
class Atom:
    text: str
    kind: str  # "symbol", "string" or "regex"


class SbplSyntaxError(ValueError):
    pass


def _tokens(text: str) -> list[str | Atom]:
    out: list[str | Atom] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in " \t\n":
            i += 1
        elif ch == ";":
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif ch in "()":
            out.append(ch)
            i += 1
        elif ch == '"' or text.startswith('#"', i):
            kind = "regex" if ch == "#" else "string"
            start = i + (2 if kind == "regex" else 1)
            j = start
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" and kind == "string" else 1
            if j >= len(text):
                raise SbplSyntaxError(f"unterminated {kind} at offset {i}")
            out.append(Atom(text[start:j], kind))
            i = j + 1
        else:
            j = i
            while j < len(text) and text[j] not in ' \t\n();"':
                j += 1
            out.append(Atom(text[i:j], "symbol"))
            i = j
    return out


def parse(text: str) -> list[Form]:
    """Top-level forms; raises ``SbplSyntaxError`` on unbalanced parentheses."""
    stack: list[Form] = [[]]
    for tok in _tokens(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise SbplSyntaxError("unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            assert isinstance(tok, Atom)
            stack[-1].append(tok)
    if len(stack) != 1:
        raise SbplSyntaxError(f"{len(stack) - 1} unclosed '('")
    top = stack[0]
    if any(isinstance(f, Atom) for f in top):
        raise SbplSyntaxError("bare atom at top level")
    return [f for f in top if isinstance(f, list)]


def head(form: Form) -> str:
    first = form[0] if form else None
    return first.text if isinstance(first, Atom) else ""


def atoms(form: Form | Atom) -> list[Atom]:
    if isinstance(form, Atom):
        return [form]
    found: list[Atom] = []
    for item in form:
        found += atoms(item)
    return found


def params(form: Form | Atom) -> list[str]:
    """Keys of every ``(param "KEY")`` inside ``form``."""
    if isinstance(form, Atom):
        return []
    keys: list[str] = []
    if head(form) == "param" and len(form) == 2 and isinstance(form[1], Atom):
        keys.append(form[1].text)
    for item in form[1:]:
        keys += params(item)
    return keys
