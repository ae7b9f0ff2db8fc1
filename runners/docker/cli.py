"""``dsh-sandbox image``: build the docker runner's image on this machine.

The one command: ``dsh-sandbox image build`` (``--tag`` to name it, which the
runner reads from its ``image`` option).  No registry is contacted.
"""

from __future__ import annotations

import click
from dsh.runners.docker.client import DEFAULT_IMAGE


@click.group("image")
def image() -> None:
    """Build the local Docker image the docker runner uses."""


@image.command("build")
@click.option("--tag", default=DEFAULT_IMAGE, show_default=True, help="Image name to create.")
@click.option("--if-missing", is_flag=True, help="Do nothing when the image already exists.")
def build(tag: str, if_missing: bool) -> None:
    """Assemble a rootfs from this machine's programs and `docker import` it.

    Copies bash, dash, GNU coreutils, grep, sed, findutils, setsid, ps and kill
    with their shared libraries (found by ldd), adds busybox-static applets for
    anything missing, and imports the tar with the docker SDK.  Never pulls.
    """
    from dsh.runners.docker.image import build_image

    build_image(tag, if_missing=if_missing, log=lambda line: click.echo(line))
