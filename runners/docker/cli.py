"""``dsh-sandbox image``: build the docker runner's image on this machine.

The one command: ``dsh-sandbox image build`` (``--tag`` to name it, which the
runner reads from its ``image`` option).  No registry is contacted.
"""

from __future__ import annotations

import click
from dsh.runners.docker.image_name import DEFAULT_IMAGE


@click.group("image")
def image() -> None:
    """Build the local Docker image the docker runner uses."""


@image.command("build")
@click.option("--tag", default=DEFAULT_IMAGE, show_default=True, help="Image name to create.")
@click.option("--if-missing", is_flag=True,
              help="Do nothing when the image already exists (auto still upgrades a host-copy image).")
@click.option("--method", type=click.Choice(["auto", "debian", "host"]), default="auto", show_default=True,
              help="debian: mmdebstrap a minimal Debian with python3-venv, gcc, make, git; "
                   "host: copy this machine's programs; auto: debian when mmdebstrap works, else host.")
def build(tag: str, if_missing: bool, method: str) -> None:
    """Assemble a rootfs and `docker import` it.  Never pulls from a registry.

    debian: `mmdebstrap --variant=minbase` with python3, python3-venv, gcc,
    libc6-dev, make, git (from the host's apt sources when it runs that suite,
    else mmdebstrap's default; DSH_DEBIAN_MIRROR and DSH_DEBIAN_SUITE override
    the sources and the suite).  host: copies bash,
    coreutils, grep, sed, findutils, setsid, ps, kill, git, python3 with their
    shared libraries (found by ldd) and adds busybox-static applets.
    """
    from dsh.runners.docker.image import build_image

    build_image(tag, if_missing=if_missing, method=method, log=lambda line: click.echo(line))
