"""Signal numbers and the names results carry (``SIGTERM``; ``SIG42`` for one
without a name), both ways."""

from __future__ import annotations

import re
import signal as _signal


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def signal_number(name: str) -> int | None:
    try:
        return int(_signal.Signals[name])
    except KeyError:
        m = re.fullmatch(r"SIG(\d+)", name)
        return int(m.group(1)) if m else None
