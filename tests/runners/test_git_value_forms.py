"""Git config forms whose program used to stay writable.

``alias.lint = !python3 -m tools.lint`` runs ``tools/lint.py`` (and
``tools/__init__.py``), ``alias.t = !sh $(pwd)/tools/t.sh`` and
``alias.t2 = !sh "${GIT_PREFIX:-.}/t2.sh"`` run files named after a shell
expansion, and a global ``alias.g = !python3 -m tools.gx`` runs
``tools/gx/__main__.py`` in every repository.  A command rewrites each; the
host's real ``git lint``/``t``/``t2``/``g`` then run in the repository
(``HOME`` is the test's private directory): the benign files must run, the
rewritten ones never.  bwrap and docker as root and nobody; landlock reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.sandbox.git_value_words import command_words

from tests.runners.test_trusted_files import Box, repo, runner_for
from tests.runners.test_trusted_files import box as box
from tests.runners.test_trusted_gitsurface import executable, host_git, reported, run

LOCAL = ('[alias]\n\tlint = !python3 -m tools.lint\n\tt = !sh $(pwd)/tools/t.sh\n'
         '\tt2 = !sh "${GIT_PREFIX:-.}/t2.sh"\n')
GLOBAL = "[alias]\n\tg = !python3 -m tools.gx\n"
FILES = {  # path in the repository: (what runs it, the language)
    "tools/lint.py": ("lint", "py"),
    "tools/__init__.py": ("init", "py"),
    "tools/t.sh": ("t", "sh"),
    "t2.sh": ("t2", "sh"),
    "tools/gx/__main__.py": ("g", "py"),
}


def _body(mark: Path, lang: str) -> str:
    return f"open({str(mark)!r}, 'a').close()\n" if lang == "py" else f"touch {mark}\n"


@pytest.mark.parametrize("name", ["bwrap", "docker", "landlock"])
def test_module_and_expanded_paths_in_aliases_stay_read_only(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    base = box.ws.parent
    sub = box.ws / "sub"
    git_dir = repo(sub)
    with (git_dir / "config").open("a") as config:
        config.write(LOCAL)
    (base / ".gitconfig").write_text(GLOBAL)
    for rel, (what, lang) in FILES.items():
        executable(sub / rel, _body(base / f"benign-{what}", lang))
    box.own()
    attack = "; ".join(f"printf '%s\\n' {_body(base / f'pwned-{what}', lang).strip()!r} > sub/{rel}"
                       for rel, (what, lang) in FILES.items())
    ran = run(box, runner, attack + "; exit 0")
    if name == "landlock":
        reported(ran, *(sub / rel for rel in FILES))
        return
    assert ran.returncode == 0, ran.err
    for alias in ("lint", "t", "t2", "g"):
        host_git(box, sub, alias)
    pwned = sorted(p.name for p in base.iterdir() if p.name.startswith("pwned"))
    assert pwned == [], f"host git ran what the sandboxed command wrote: {pwned}"
    benign = sorted(p.name for p in base.iterdir() if p.name.startswith("benign"))
    assert benign == sorted(f"benign-{what}" for what, _lang in FILES.values()), "the aliases did not run"


@pytest.mark.parametrize(("value", "files"), [
    ("!python3 -m tools.lint", {"tools/lint.py", "tools/__init__.py", "tools/lint/__init__.py",
                                "tools/lint/__main__.py"}),
    ("!python -mpkg", {"pkg.py", "pkg/__init__.py", "pkg/__main__.py"}),
    ("!sh $(pwd)/tools/t.sh", {"tools/t.sh"}),
    ('!sh "${GIT_PREFIX:-.}/t2.sh"', {"t2.sh"}),
    ("!sh `pwd`/x.sh", {"x.sh"}),
    ("!bash -c 'sh $PWD/y.sh'", {"y.sh"}),
])
def test_command_words_name_modules_and_paths_after_expansions(value: str, files: set[str]) -> None:
    assert files <= command_words(value)
