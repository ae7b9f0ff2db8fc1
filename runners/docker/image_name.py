"""The docker runner's default image name, apart from the client so that
``dsh-sandbox --help`` (which shows the ``image`` command's default) does not
import the socket and HTTP code."""

from __future__ import annotations

DEFAULT_IMAGE = "dsh-sandbox/runtime:latest"
