"""``dsh-sandbox``: the command-line interface.

The console script enters here.  ``--version`` alone is answered without
importing click or any command (a script asking which version is installed
pays for an interpreter start, not for the CLI); everything else goes to the
command group in ``dsh.cli.app``.
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"

#: What ``--version`` prints (click's ``version_option`` wording).
VERSION_LINE = f"dsh-sandbox, version {__version__}"


def main(argv: list[str] | None = None) -> object:
    """Console entry point (see ``dsh.cli.app.run_main``).  No ``typing``
    import here: it alone is a third of what ``--version`` costs."""
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:
        sys.stdout.write(VERSION_LINE + "\n")
        sys.stdout.flush()
        sys.exit(0)
    from dsh.cli.app import run_main

    return run_main(argv)
