"""The words of a command an approval rule may match, and the words it never may.

A rule that approves a command by its first words (``git push``) must not
approve what further words make of it: ``git push --receive-pack=./rp.sh``
runs a script the denied run wrote.  So a prefix rule lists the further
arguments it allows, and on top of that the words in ``DANGEROUS`` never
match, whatever the list says: options that name a program to run, a config
to read, or another directory or repository to act on.

Command strings come from a model and run through ``bash -c``; the rule sees
what ``shlex`` makes of them.  That is what bash runs only for a *simple*
command: no operators, redirections, expansions, globs or escapes, so
anything else never matches an argv or prefix rule.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dsh.sandbox.lazy_pattern import LazyPattern

#: What makes bash do more than run one program with these words: operators
#: and redirections (``;&|<>``), grouping (``(){}``), expansions (``$``,
#: backquote, ``~``), globs (``*?[``: a file the denied run created could
#: become an option), comments (``#``), escapes and line breaks.
_NOT_SIMPLE = LazyPattern(r"[;&|<>(){}$`\\\n\r*?\[\]~#!]")


def simple_argv(command: str) -> list[str] | None:
    """The argv bash would run for ``command``, or None if bash would do more
    than run one program (or ``command`` is not a whole command)."""
    if _NOT_SIMPLE.search(command):
        return None
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    # ``NAME=value prog``: an assignment changes the program's environment.
    if not argv or "=" in argv[0]:
        return None
    return argv


@dataclass(frozen=True)
class Dangerous:
    """One word a prefix rule never lets through for ``tool``.

    ``kind``: ``long`` (``--name``, ``--name=value`` and any abbreviation the
    tool accepts, down to ``--na``), ``short`` (``-x``, also bundled or with an
    attached value: ``-ax``, ``-xvalue``), ``assignment`` (any ``NAME=value``
    word), ``transport`` (any word holding ``::``), ``word`` (this exact word:
    a subcommand that runs a program), ``plus`` (any word starting with ``+``)."""

    tool: str
    word: str
    kind: Literal["long", "short", "assignment", "transport", "word", "plus"]
    why: str
    subcommands: tuple[str, ...] = ()  # only after one of these (empty: always)


_FETCHERS = ("push", "fetch", "pull", "clone", "ls-remote", "archive", "remote", "submodule")
_MERGERS = ("merge", "pull", "rebase", "cherry-pick", "revert")

#: Per tool, the words that name a program, a config or a place to act on.
#: A tool not listed here gets no patterns in ``args``: only the words listed.
DANGEROUS: tuple[Dangerous, ...] = (
    # git ----------------------------------------------------------------------------
    Dangerous("git", "-c", "short", "sets any config value for this run (core.sshCommand, core.fsmonitor, "
              "alias.*, ...), each of which can name a program"),
    Dangerous("git", "--config-env", "long", "sets any config value from an environment variable"),
    Dangerous("git", "--config", "long", "clone writes config (core.fsmonitor, core.hooksPath) into the new "
              "repository, run by its next git command"),
    Dangerous("git", "-C", "short", "runs in another directory: that repository's config and hooks apply"),
    Dangerous("git", "--git-dir", "long", "acts on another repository, with its config and hooks"),
    Dangerous("git", "--work-tree", "long", "acts on another working tree (its filters and attributes)"),
    Dangerous("git", "--exec-path", "long", "the directory git takes its own programs from"),
    Dangerous("git", "--receive-pack", "long", "the program run for the other side of a push; for a path "
              "remote it runs on this machine"),
    Dangerous("git", "--upload-pack", "long", "the program run for the other side of a fetch or clone"),
    Dangerous("git", "--exec", "long", "push, archive and ls-remote: the remote program; rebase: a shell "
              "command run after each commit"),
    Dangerous("git", "-u", "short", "clone and ls-remote: short for --upload-pack", ("clone", "ls-remote")),
    Dangerous("git", "-x", "short", "rebase: a shell command after each commit; difftool: the diff program",
              ("rebase", "difftool")),
    Dangerous("git", "--extcmd", "long", "difftool: the diff program to run"),
    Dangerous("git", "--tool", "long", "difftool and mergetool: the tool (a configured command) to run"),
    Dangerous("git", "-t", "short", "difftool and mergetool: short for --tool", ("difftool", "mergetool")),
    Dangerous("git", "--template", "long", "clone and init copy hooks from this directory into the repository"),
    Dangerous("git", "--separate-git-dir", "long", "puts the repository (its hooks and config) elsewhere"),
    Dangerous("git", "--strategy", "long", "merge strategies are programs (git-merge-NAME on PATH)"),
    Dangerous("git", "-s", "short", "short for --strategy", _MERGERS),
    Dangerous("git", "--open-files-in-pager", "long", "grep runs this pager program on the matches"),
    Dangerous("git", "-O", "short", "grep: short for --open-files-in-pager", ("grep",)),
    Dangerous("git", "--sendmail-cmd", "long", "send-email runs this command"),
    Dangerous("git", "--smtp-server", "long", "send-email runs it when it is a path"),
    Dangerous("git", "--to-cmd", "long", "send-email runs this command"),
    Dangerous("git", "--cc-cmd", "long", "send-email runs this command"),
    Dangerous("git", "--header-cmd", "long", "send-email runs this command"),
    Dangerous("git", "-t", "short", "commit: short for --template (the message template file)", ("commit",)),
    Dangerous("git", "foreach", "word", "submodule foreach runs its argument as a shell command in every "
              "submodule", ("submodule",)),
    Dangerous("git", "run", "word", "bisect run runs its argument as a program at every step", ("bisect",)),
    Dangerous("git", "filter-branch", "word", "runs its --tree-filter, --index-filter, --msg-filter ... "
              "arguments as shell commands"),
    Dangerous("git", "--tree-filter", "long", "filter-branch: a shell command run on every commit"),
    Dangerous("git", "--index-filter", "long", "filter-branch: a shell command run on every commit"),
    Dangerous("git", "--msg-filter", "long", "filter-branch: a shell command run on every message"),
    Dangerous("git", "--env-filter", "long", "filter-branch: a shell command run on every commit"),
    Dangerous("git", "--commit-filter", "long", "filter-branch: a shell command that makes every commit"),
    Dangerous("git", "--parent-filter", "long", "filter-branch: a shell command run on every commit"),
    Dangerous("git", "--tag-name-filter", "long", "filter-branch: a shell command run on every tag name"),
    Dangerous("git", "instaweb", "word", "starts a web server program (--httpd) and a browser (--browser)"),
    Dangerous("git", "--httpd", "long", "instaweb: the web server program to run"),
    Dangerous("git", "--browser", "long", "instaweb and help: the browser program to run"),
    Dangerous("git", "-d", "short", "instaweb: short for --httpd", ("instaweb",)),
    Dangerous("git", "-b", "short", "instaweb: short for --browser", ("instaweb",)),
    Dangerous("git", "--output", "long", "log, diff, format-patch...: writes the output to any file"),
    Dangerous("git", "--output-directory", "long", "format-patch: writes the patches into any directory"),
    Dangerous("git", "-o", "short", "format-patch: short for --output-directory", ("format-patch",)),
    Dangerous("git", "config", "word", "writes config values (core.fsmonitor, core.pager, alias.*), each of "
              "which can name a program a later git command runs"),
    Dangerous("git", "::", "transport", "a TRANSPORT::ADDRESS remote runs git-remote-TRANSPORT (ext:: runs "
              "a shell command)", _FETCHERS),
    # make ---------------------------------------------------------------------------
    Dangerous("make", "-f", "short", "names the makefile whose recipes run"),
    Dangerous("make", "--file", "long", "names the makefile whose recipes run"),
    Dangerous("make", "--makefile", "long", "names the makefile whose recipes run"),
    Dangerous("make", "-C", "short", "runs another directory's makefile"),
    Dangerous("make", "--directory", "long", "runs another directory's makefile"),
    Dangerous("make", "-I", "short", "where included makefiles are looked for"),
    Dangerous("make", "--include-dir", "long", "where included makefiles are looked for"),
    Dangerous("make", "-E", "short", "evaluates its value as makefile text"),
    Dangerous("make", "--eval", "long", "evaluates its value as makefile text"),
    Dangerous("make", "=", "assignment", "overrides a variable; SHELL, CC and the like name programs"),
    # npm ----------------------------------------------------------------------------
    Dangerous("npm", "--script-shell", "long", "the shell that package scripts run in"),
    Dangerous("npm", "--userconfig", "long", "reads another npmrc (registry, script-shell, ...)"),
    Dangerous("npm", "--globalconfig", "long", "reads another npmrc (registry, script-shell, ...)"),
    Dangerous("npm", "--prefix", "long", "acts on another directory's package.json and its scripts"),
    Dangerous("npm", "--node-options", "long", "options for node, e.g. --require of any script"),
    Dangerous("npm", "--call", "long", "npm exec runs this shell command"),
    Dangerous("npm", "-c", "short", "npm exec: short for --call"),
    Dangerous("npm", "--package", "long", "npm exec installs and runs this package"),
    Dangerous("npm", "exec", "word", "runs any package's program (downloaded if missing)"),
    Dangerous("npm", "x", "word", "short for npm exec"),
    Dangerous("npm", "--registry", "long", "packages, and the install scripts they run, from elsewhere"),
    # cargo --------------------------------------------------------------------------
    Dangerous("cargo", "--config", "long", "sets any config value (target runner, linker, rustc wrapper)"),
    Dangerous("cargo", "-Z", "short", "unstable flags, config includes among them"),
    Dangerous("cargo", "--manifest-path", "long", "builds another package (its build.rs runs)"),
    Dangerous("cargo", "-C", "short", "runs in another directory, with its config and build scripts"),
    Dangerous("cargo", "+", "plus", "+TOOLCHAIN picks the toolchain rustup runs; a path toolchain (linked "
              "from the workspace) is any program"),
)  # fmt: skip

KNOWN_TOOLS = frozenset(d.tool for d in DANGEROUS)


def tool_of(argv: Sequence[str]) -> str:
    return os.path.basename(argv[0]) if argv else ""


def _hits(rule: Dangerous, word: str) -> bool:
    if rule.kind == "transport":
        return "::" in word
    if rule.kind == "assignment":
        return "=" in word and not word.startswith("-")
    if rule.kind == "word":
        return word == rule.word
    if rule.kind == "plus":
        return word.startswith("+")
    if not word.startswith("-") or word in ("-", "--"):
        return False
    if rule.kind == "long":
        name = word.split("=", 1)[0]
        if not name.startswith("--"):
            if len(name) < 3:
                return False
            name = "-" + name  # some parsers (npm's) take -name for --name
        # getopt_long and git accept any unambiguous abbreviation: --receiv=./x, --e.
        return rule.word.startswith(name)
    # short: -x alone, bundled with other flags (-ax) or with its value attached (-xVALUE)
    return not word.startswith("--") and rule.word[1] in word[1:]


def dangerous_word(argv: Sequence[str], word: str) -> Dangerous | None:
    """The table entry ``word`` hits as a further argument of ``argv``'s tool, if any.

    An entry for some subcommands applies when any word of ``argv`` is one of
    them: which word a tool takes for its subcommand depends on its options
    (``git --namespace foo clone``), so none is guessed."""
    tool, words = tool_of(argv), set(argv[1:])
    for rule in DANGEROUS:
        if rule.tool == tool and (not rule.subcommands or words & set(rule.subcommands)) and _hits(rule, word):
            return rule
    return None


def is_pattern(word: str) -> bool:
    return any(c in word for c in "*?[")


def word_allowed(argv: Sequence[str], word: str, allowed: Sequence[str]) -> bool:
    """May ``word`` follow ``argv``'s prefix, given the rule's ``args``?

    A listed word matches itself; a pattern (``*?[``, only for the tools in
    ``DANGEROUS``) matches words that are not options.  Nothing in the table
    matches, listed or not."""
    if dangerous_word(argv, word) is not None:
        return False
    for arg in allowed:
        if not is_pattern(arg):
            if word == arg:
                return True
        elif not word.startswith("-") and fnmatch.fnmatchcase(word, arg):
            return True
    return False
