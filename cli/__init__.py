"""``dsh-sandbox``: the command-line interface.

The ``dsh-sandbox`` script enters here.  ``--version`` alone, and ``--help``
alone when click would print the same text (``dsh.cli.group_help``), are
answered without importing click or any command: a script asking which
version is installed, or a person asking what there is, pays for an
interpreter start, not for the CLI.  Everything else goes to the command
group in ``dsh.cli.app``.
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"

#: What ``--version`` prints (click's ``version_option`` wording).
VERSION_LINE = f"dsh-sandbox, version {__version__}"


def main(argv: list[str] | None = None) -> object:
    """Console entry point (see ``dsh.cli.app.run_main``).  No ``typing``
    import here: it alone is a third of what ``--version`` costs."""
    args = sys.argv[1:] if argv is None else argv
    if sys.stdout is not None and args == ["--version"]:
        _answer(VERSION_LINE + "\n")
    if sys.stdout is not None and args in (["--help"], ["-h"]):
        from dsh.cli.group_help import group_help

        text = group_help()
        if text is not None:
            _answer(text)
    from dsh.cli.app import run_main

    return run_main(argv)


def _answer(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        stdout_failed(exc)
    sys.exit(0)


def stdout_failed(exc: OSError) -> None:
    """Standard output cannot be written: exits.  A reader that left
    (``| true``, ``| head``) ends it quietly, with status 0: nothing more to
    say.  Anything else (a full disk) is one line on stderr, status 1."""
    _drop_stdout()
    if isinstance(exc, BrokenPipeError):
        sys.exit(0)
    sys.stderr.write(f"dsh-sandbox: cannot write to standard output: {exc.strerror or exc}\n")
    sys.exit(1)


def _drop_stdout() -> None:
    # What is left in the buffer would fail again at exit, with a traceback.
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
