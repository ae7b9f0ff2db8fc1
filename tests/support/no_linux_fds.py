"""pytest plugin (``-p tests.support.no_linux_fds``): run as on macOS, without
the Linux-only fd calls of the process layer (pidfd_open, eventfd*)."""

from __future__ import annotations

import os

HIDDEN = ("pidfd_open", "eventfd", "eventfd_read", "eventfd_write")

for _name in HIDDEN:
    if hasattr(os, _name):
        delattr(os, _name)
