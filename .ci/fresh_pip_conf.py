"""The host's pip configuration, for a fresh root filesystem (.ci/fresh-machine.sh).

Usage: python3 fresh_pip_conf.py OUT_DIR

Writes OUT_DIR/pip.conf (the settings of ``pip config list``), OUT_DIR/binds
(local directories the settings name, to bind read-only at the same path) and
OUT_DIR/copies ("SRC DST" per line: files to copy in).  A local index's
``simple`` directory is bound with its parent, where its files lie.  Files (a
CA bundle holding a proxy's certificate, a constraints file) move to
/usr/local/share/dsh-fresh, because Debian's packages may later replace the
same path inside the root filesystem (ca-certificates rewrites its bundle).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

COPY_DIR = "/usr/local/share/dsh-fresh"


def main(out: Path) -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    settings: dict[str, str] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        if name and value:
            # `pip config list` shows the environment's PIP_* first; they win.
            settings.setdefault(name, value.strip().strip("'\""))
    binds: set[str] = set()
    copies: dict[str, str] = {}
    for name, value in settings.items():
        tokens = []
        for token in value.split():
            path = token.removeprefix("file://").rstrip("/")
            if path.startswith("/") and os.path.isdir(path):
                binds.add(os.path.dirname(path) if os.path.basename(path) == "simple" else path)
            elif path.startswith("/") and os.path.isfile(path):
                token = copies.setdefault(path, f"{COPY_DIR}/{len(copies)}-{os.path.basename(path)}")
            tokens.append(token)
        settings[name] = " ".join(tokens)
    (out / "pip.conf").write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(settings.items())))
    (out / "binds").write_text("".join(f"{p}\n" for p in sorted(binds)))
    (out / "copies").write_text("".join(f"{src} {dst}\n" for src, dst in sorted(copies.items())))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
