"""Docker client access shared by the runner, the image builder and prune.

The ``docker`` SDK is imported here, inside functions, so importing the runner
(or running ``dsh-sandbox run`` with another runner) never loads it.
Connection follows ``DOCKER_HOST`` & co. (``docker.from_env()``), which is how
a daemon on another machine is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from typing import Any

from dsh.runners.docker.image_name import DEFAULT_IMAGE as DEFAULT_IMAGE
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.lazy_pattern import LazyPattern

LABEL = "dsh-sandbox"
LABEL_OWNER_PID = "dsh-sandbox.owner-pid"
LABEL_OWNER_START = "dsh-sandbox.owner-start"
LABEL_OWNER_HOST = "dsh-sandbox.owner-host"
LABEL_OWNER_UID = "dsh-sandbox.owner-uid"
LABEL_PLACEHOLDERS = "dsh-sandbox.placeholders"  # empty dirs this container created
LABEL_PROTECTED = "dsh-sandbox.protected"  # paths it binds read-only
INSTALL_HINT = "install the docker extra: pip install 'dsh-sandbox[docker]'"
START_HINT = (
    "start it: dockerd --bridge=none --iptables=false (or: systemctl start docker), "
    "or point DOCKER_HOST at a running daemon"
)
BUILD_HINT = "build it (no registry needed): dsh-sandbox image build"


def missing_image_reason(image: str) -> str:
    """Why ``image`` cannot be used and how to get it: the runner never pulls,
    so a user's own dev image must be built (or pulled by hand) first."""
    if image == DEFAULT_IMAGE:
        return f"image {image} not found locally (the runner never pulls); {BUILD_HINT}"
    return (f"image {image} not found locally (the runner never pulls); build it first with "
            f"docker build -t {image} DIR (it needs /bin/sh and bash), or "
            f"dsh-sandbox image build --tag {image} for the default toolset; "
            f"if you trust its registry, docker pull {image} yourself")

# The docker reference grammar, simplified: [host[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_RE = LazyPattern(
    # A registry host is told apart by a dot, a port or "localhost" (as docker does).
    r"^(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def import_sdk() -> Any:
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        raise SandboxUnavailable(INSTALL_HINT, runner="docker") from None
    return docker


def connect(timeout: int = 60) -> Any:
    """A ``docker.DockerClient`` for ``DOCKER_HOST``; ``SandboxUnavailable`` if down."""
    docker = import_sdk()
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests and OS errors
        refused = _socket_refused()
        if refused is not None:
            raise SandboxUnavailable(refused, runner="docker") from None
        raise SandboxUnavailable(
            f"Docker daemon not reachable at {docker_host()}: {_first_line(exc)}; {START_HINT}",
            runner="docker",
        ) from None
    return client


def _socket_refused() -> str | None:
    """Why this user may not use a local daemon that is running, if that is why:
    "start it" is the wrong advice for a socket that exists but is not this user's."""
    host = docker_host()
    if not host.startswith("unix://"):
        return None
    path = host.removeprefix("unix://")
    try:
        os.stat(path)
    except PermissionError:
        pass  # a directory on the way is closed to this user
    except OSError:
        return None
    else:
        if os.access(path, os.R_OK | os.W_OK):
            return None
    return (f"the Docker daemon's socket {path} is not open to this user (uid {os.getuid()}): "
            f"add the user to the socket's group (usually docker: usermod -aG docker USER, then log in "
            f"again), or point DOCKER_HOST at a daemon this user may use (a rootless daemon's socket); "
            f"note that a user who can reach the daemon can get root on this machine")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def validate_image_name(image: object, *, field: str = "image") -> str:
    if not isinstance(image, str) or not _IMAGE_RE.match(image):
        raise ConfigError(
            f"docker runner {field}: {image!r} is not a valid image reference "
            f"(lowercase name, optional :tag), e.g. {DEFAULT_IMAGE}"
        )
    return image


def split_tag(image: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag), a registry port not mistaken for a tag."""
    name, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return image, "latest"


def find_image(client: Any, image: str) -> str | None:
    """The local image id of ``image``, or ``None``.  Never pulls."""
    from docker.errors import APIError, ImageNotFound  # type: ignore[import-untyped]

    try:
        return str(client.api.inspect_image(image)["Id"])
    except ImageNotFound:
        return None
    except APIError as exc:
        if exc.status_code == 400:  # "invalid reference format"
            raise ConfigError(
                f"docker runner image: {image!r} is rejected by the daemon "
                f"({_first_line(exc)}); use a reference like {DEFAULT_IMAGE}"
            ) from None
        raise


def process_start_time(pid: int) -> str | None:
    """The kernel start time of ``pid`` (guards against pid reuse), ``None`` if gone (or a zombie)."""
    from dsh.runners.linux.orphans import live_start_time

    start = live_start_time(pid)
    return str(start) if start is not None else None


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """Labels naming the container's owner: this process, or ``pid`` (a keeper
    that outlives it); the container is reaped once its owner is gone."""
    pid = os.getpid() if pid is None else pid
    return {
        LABEL: "1",
        LABEL_OWNER_PID: str(pid),
        LABEL_OWNER_START: process_start_time(pid) or "",
        LABEL_OWNER_HOST: socket.gethostname(),
        LABEL_OWNER_UID: str(os.getuid()),
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """True unless the container's owner process is known to be gone.

    A container made from another machine (``DOCKER_HOST``) cannot be judged
    from here, so it counts as alive; ``prune --all`` removes those.
    """
    if labels.get(LABEL_OWNER_HOST) != socket.gethostname():
        return True
    try:
        pid = int(labels.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return False
    start = process_start_time(pid)
    recorded = labels.get(LABEL_OWNER_START) or start  # unrecorded: the pid alone decides
    return start is not None and start == recorded


def reap_dead_owners(client: Any) -> list[str]:
    """Remove this user's containers on this host whose owner process is gone.

    Another user's containers are never touched (the label says whose they are),
    nor a live session's (pid and start time), nor a container without the
    labels that tell (``runners --prune`` is for those).  Returns the names removed.
    """
    mine = {LABEL: "1", LABEL_OWNER_UID: str(os.getuid()), LABEL_OWNER_HOST: socket.gethostname()}
    filters = {"label": [f"{k}={v}" for k, v in mine.items()]}
    removed: list[str] = []
    placeholders: list[str] = []
    for info in client.api.containers(all=True, filters=filters):
        labels = info.get("Labels") or {}
        if any(labels.get(k) != v for k, v in mine.items()) or owner_alive(labels):
            continue
        if remove_container(client, info["Id"]):
            removed.append(str((info.get("Names") or [info["Id"]])[0]).lstrip("/"))
            placeholders += placeholders_of(labels)
    remove_placeholders(client, placeholders)
    return removed


def remove_container(client: Any, container_id: str) -> bool:
    """Force-remove a container (and its anonymous volumes); False if already gone."""
    from docker.errors import NotFound

    try:
        client.api.remove_container(container_id, force=True, v=True)
    except NotFound:
        return False
    return True


def _json_list(labels: dict[str, str], key: str) -> list[str]:
    try:
        value = json.loads(labels.get(key, "[]"))
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def hold_placeholder(path: str) -> int | None:
    """A shared lock on placeholder ``path`` (an fd to close to release it), taken
    by a session from when it relies on the directory until its container is
    created (its label then keeps the placeholder).  ``None`` if the directory
    is gone or was replaced meanwhile: make it again."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        here, mine = os.lstat(path), os.fstat(fd)
        if (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def remove_placeholders(client: Any, paths: list[str]) -> list[str]:
    """Remove placeholder dirs that no remaining container binds and that are still empty.

    Another session's container may bind the same missing protected path; its
    label keeps the placeholder alive until that container goes too.  A
    session about to create such a container holds a shared lock on the
    directory (``hold_placeholder``): a placeholder locked so is left alone.
    """
    if not paths:
        return []
    locked: dict[str, int] = {}
    try:
        for path in dict.fromkeys(paths):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # gone already, or not ours to judge
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # a session relies on it right now
                continue
            locked[path] = fd
        if not locked:
            return []
        in_use: set[str] = set()
        for container in client.api.containers(all=True, filters={"label": LABEL}):
            in_use.update(_json_list(container.get("Labels") or {}, LABEL_PROTECTED))
        removed = []
        for path in locked:
            if path in in_use:
                continue
            with contextlib.suppress(OSError):  # not empty (or gone): the user's now
                os.rmdir(path)
                removed.append(path)
        return removed
    finally:
        for fd in locked.values():
            os.close(fd)


def placeholders_of(labels: dict[str, str]) -> list[str]:
    return _json_list(labels, LABEL_PLACEHOLDERS)


# A user's own image may lack what the runner's scripts run: found once per
# container, not at the first kill.
TOOLS_CHECK = "for t in sh bash sleep; do command -v $t >/dev/null 2>&1 || printf '%s ' $t; done"


def missing_tools(container: Any) -> str:
    """The runner's tools the container's image lacks ("" when none)."""
    from docker.errors import DockerException

    try:
        code, out = container.exec_run(["/bin/sh", "-c", TOOLS_CHECK], user="0")
    except DockerException as exc:
        # Only a missing shell is the image's fault; anything else (a pids or
        # memory limit too small to start it) surfaces when the command runs,
        # with the hint that names the limit.
        return "/bin/sh" if _not_found(str(exc)) else ""
    text = (out or b"").decode("utf-8", "replace").strip()
    if code == 0:
        return ", ".join(text.split())
    return "/bin/sh" if code == 127 or _not_found(text) else ""


def _not_found(message: str) -> bool:
    lowered = message.lower()
    return "no such file or directory" in lowered or "executable file not found" in lowered
