"""pytest plugin (``-p tests.support.no_linux_fds``): run as on macOS, without
the Linux-only fd calls of the process layer (pidfd_open, eventfd*), nor
``waitid``, which Python has on macOS only from 3.13."""

from __future__ import annotations

import os

import pytest

HIDDEN = ("pidfd_open", "eventfd", "eventfd_read", "eventfd_write", "waitid")


def pytest_configure(config: pytest.Config) -> None:
    for name in HIDDEN:
        if hasattr(os, name):
            delattr(os, name)


def pytest_report_header(config: pytest.Config) -> str:
    gone = [name for name in HIDDEN if not hasattr(os, name)]
    return "hidden: " + ",".join(gone)
