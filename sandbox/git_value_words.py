"""The words of a git config value that could name a file git would run.

A command value (an ``!`` alias, ``core.fsmonitor``, a filter driver) is
shell: any word can be a program or a script handed to one, bare names
included (``python3 fsm.py``, ``sh tools.sh``), and an argument can itself be
a script (``bash -c 'python3 inner.py'``).  Words are over-collected on
purpose: only those that name an existing file where git runs the command are
kept by the caller, and a false match costs a refused write.
"""

from __future__ import annotations

import functools
import os
import shlex

from dsh.sandbox.lazy_pattern import LazyPattern

_SCRIPT_DEPTH = 3  # ``sh -c "bash -c '...'"`` nesting followed
#: Files a program reads when given none: a word naming the program protects them.
_IMPLIED = {
    "make": ("Makefile", "makefile", "GNUmakefile"), "gmake": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json",), "pnpm": ("package.json", ".pnpmfile.cjs"), "yarn": ("package.json",),
    "npx": ("package.json",), "just": ("justfile", "Justfile", ".justfile"), "rake": ("Rakefile",),
    "tox": ("tox.ini",), "nox": ("noxfile.py",), "invoke": ("tasks.py",), "inv": ("tasks.py",),
    "ninja": ("build.ninja",), "cmake": ("CMakeLists.txt",), "meson": ("meson.build",),
    "cargo": ("Cargo.toml", "build.rs"), "mvn": ("pom.xml",), "gradle": ("build.gradle", "build.gradle.kts"),
    "task": ("Taskfile.yml", "Taskfile.yaml"), "bazel": ("BUILD", "BUILD.bazel", "WORKSPACE", "MODULE.bazel"),
}  # fmt: skip
_OPERATORS = frozenset(";&|()<>")

#: Shell expansions right before a slash (``$(pwd)/x``, ``"${GIT_PREFIX:-.}/x"``,
#: ``$HOME/x``): the path after them is taken relative to where git runs the
#: command, conservatively (``$(pwd)`` and ``GIT_PREFIX`` name the top or a
#: directory under it; a word naming no file costs nothing).
_EXPANSION_PREFIX = LazyPattern(r"(?:\$\([^()]*\)|\$\{[^{}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|`[^`]*`)+/+")
#: Interpreters whose ``-m NAME`` runs a module found from the working directory.
_MODULE_FLAG = LazyPattern(r"^-m(.*)$")
_MODULE_NAME = LazyPattern(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_TOKEN = LazyPattern(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|([^\s;&|()<>'"`]+)""")
_SHLEX_MAX = 4096  # longer values are split by ``_TOKEN`` alone (shlex is slow: seconds per MiB)


def _split(text: str) -> list[str]:
    """The words of a shell command: shlex's (quotes joined as the shell
    does), and a regular expression's (each quoted or bare run on its own),
    which is fast on any length and never fails on an unbalanced quote."""
    words = [a or b or c for a, b, c in _TOKEN.findall(text)]
    if len(text) <= _SHLEX_MAX:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words += list(lexer)
        except ValueError:  # an unbalanced quote: git's shell would refuse, we still look
            pass
    return words


def _module_files(name: str) -> set[str]:
    """The files ``python -m a.b`` runs from the working directory: each
    package's ``__init__.py`` on the way, and ``a/b.py`` or ``a/b/__main__.py``."""
    parts = name.split(".")
    out = {"/".join(parts) + ".py", "/".join(parts) + "/__main__.py"}
    out |= {"/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts) + 1)}
    return out


def _modules(words: list[str]) -> set[str]:
    out: set[str] = set()
    for i, word in enumerate(words):
        flag = _MODULE_FLAG.match(word)
        if flag is None:
            continue
        name = flag.group(1) or (words[i + 1] if i + 1 < len(words) else "")
        if _MODULE_NAME.match(name):
            out |= _module_files(name)
    return out


@functools.lru_cache(maxsize=4096)
def command_words(value: str, depth: int = 0) -> frozenset[str]:
    """Every word of a command that could name a file: each argument (bare
    names too), what follows ``=`` in ``--opt=file`` or ``VAR=file``, the words
    of an argument that is itself a script (``sh -c '...'``), and the default
    files of a program that reads one (``make``)."""
    out: set[str] = set()
    text = value.lstrip("!").strip()
    stripped = _EXPANSION_PREFIX.sub("", text)
    words = _split(text) + (_split(stripped) if stripped != text else [])
    out |= _modules(words)
    for word in words:
        if not word or set(word) <= _OPERATORS:
            continue
        word = word.lstrip("$`")  # ``$(cmd`` and backticks
        # ``--opt=file``, ``VAR=file``, ``-c core.fsmonitor='sh x.sh'`` in a plain alias.
        for part in (word, word.split("=", 1)[1]) if "=" in word else (word,):
            out.add(part)
            out.add(part.split("::", 1)[-1])  # ``ext::sh x.sh``: a transport's command
            out.update(_IMPLIED.get(os.path.basename(part), ()))
            if depth < _SCRIPT_DEPTH and any(c.isspace() or c in _OPERATORS for c in part):
                out |= command_words(part, depth + 1)
    out.discard("")
    return frozenset(out)


