"""``DockerRunner``: a warm container per container shape, an exec per command.

Options (the runner's config): ``image`` (default ``dsh-sandbox/runtime:latest``,
built by ``dsh-sandbox image build``), ``memory`` (default ``2g``; bytes or
``512m``/``2g``; ``null`` for none), ``pids`` (default 1024; ``null`` for none),
``user`` (default the host ``uid:gid``, so files keep the user's ownership).
The profile's limits win over these defaults.

Network on uses ``network_mode=host``: the daemon runs without a bridge
(``--bridge=none``), and a bridge is never used; host networking is what a
profile that turns the network on asks for.  With ``DOCKER_HOST`` on another
machine, binds refer to that machine: the workspace must exist there at the
same path (a shared filesystem).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dsh.runners.docker import client as dc
from dsh.runners.docker.argv import encode_argv, text_env
from dsh.runners.docker.keeper import DockerKeeper, connection_env
from dsh.runners.docker.kept import KeptShape, labelable, park, release_kept
from dsh.runners.docker.parked import Parking
from dsh.runners.docker.placeholder_source import empty_source
from dsh.runners.docker.report import SIGNAL_STATUS_GAP, daemon_gaps, fixed_gaps, plan_lines
from dsh.runners.docker.spec import (
    ContainerSpec,
    build_spec,
    container_env,
    create_error,
    limits_hint,
    parse_size,
)
from dsh.runners.docker.strays import after_failed_start, take_back_from
from dsh.runners.docker.verify import (
    check_container,
    check_sources,
    hold_placeholders,
    mounts_in,
    pinned_binds,
    stat_in,
)
from dsh.runners.docker.warm import KEEPALIVE, Warm, daemon_is_local, identities, pin_binds, policy_key
from dsh.runners.linux.ipc import namespaced_limitations
from dsh.runners.warm_pool import make_current
from dsh.sandbox import capability as cap
from dsh.sandbox.errors import ConfigError, DshError, SandboxUnavailable, WorkdirError
from dsh.sandbox.numeric import processes
from dsh.sandbox.pins import PinnedPaths
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import (
    Baseline,
    ConfigKey,
    Enforcement,
    Gap,
    RemoteLaunch,
    RemoteProcess,
    Runner,
    RunnerPlan,
    RunnerProbe,
    SpeedTargets,
)
from dsh.sandbox.stdin_feed import StdinFeed

if TYPE_CHECKING:
    import ssl

    from dsh.runners.docker.secrets import ContainerSecrets
    from dsh.sandbox.net_proxy import Resolver
    from dsh.sandbox.net_rules import NetworkRules

OPTIONS = ("image", "memory", "pids", "user")
DEFAULT_MEMORY = "2g"
DEFAULT_PIDS = 1024


class DockerRunner(Runner):
    name: ClassVar[str] = "docker"
    remote: ClassVar[bool] = True
    network_by_name: ClassVar[bool] = True
    network_secrets: ClassVar[bool] = True
    keeps_warm: ClassVar[bool] = True
    SPEED_TARGETS = SpeedTargets(vs_baseline=0.5)
    DEGRADATIONS: ClassVar[Mapping[str, tuple[cap.Capability, ...]]] = {
        "docker-memory-limit": (cap.LIMITS_MEMORY,),
        "docker-pids-limit": (cap.LIMITS_PROCESSES,),
        "docker-protected-symlink": (cap.PROTECTED_PATHS,),
        "docker-ro-submounts": (cap.PROTECTED_PATHS,),
        "docker-syscall-filter": (cap.SYSCALL_FILTER, cap.SOCKET_FAMILIES, cap.IO_URING, cap.KEYRING),
    }
    extra: ClassVar[str | None] = "docker"
    CONFIG_KEYS: ClassVar[Mapping[str, ConfigKey]] = {
        "image": ConfigKey("The image commands run in.", example=dc.DEFAULT_IMAGE),
    }

    def __init__(self, options: Mapping[str, Any] | None = None, *, proxy_resolver: Resolver | None = None,
                 proxy_upstream_tls: ssl.SSLContext | None = None) -> None:
        """``proxy_resolver``: how the allowlist proxy resolves names (the
        system's resolver unless given; tests map names to loopback servers)."""
        super().__init__(options)
        self._proxy_resolver = proxy_resolver
        # How the proxy checks a secret's host (tests trust a loopback server's own CA).
        self._proxy_upstream_tls = proxy_upstream_tls
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"docker runner: unknown option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(OPTIONS)}")
        self.image = dc.validate_image_name(self.options.get("image", dc.DEFAULT_IMAGE))
        self.memory = parse_size(self.options.get("memory", DEFAULT_MEMORY), field="memory")
        pids = self.options.get("pids", DEFAULT_PIDS)
        self.pids: int | None = None if pids is None else processes("docker runner pids", pids)
        user = self.options.get("user", f"{os.getuid()}:{os.getgid()}")
        if not isinstance(user, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", user):
            raise ConfigError(f"docker runner user: {user!r}; use uid:gid, e.g. 1000:1000")
        self.user: str = user
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        self._client: Any = None
        self._info: dict[str, Any] = {}
        self._warm: dict[tuple[object, ...], Warm] = {}
        self._placeholders: set[str] = set()  # empty dirs this runner made; removed at close
        # Removes this runner's containers when this process is gone, SIGKILL included.
        self._keeper = DockerKeeper()
        self._reaped = False
        self._empty_source: str | None = None  # bound at missing protected paths (placeholder_source)
        self._parking: Parking | None = None  # use files of the containers kept between processes

    # -- daemon ----------------------------------------------------------------------
    def _docker(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = dc.connect()
            return self._client

    @staticmethod
    def daemon_is_local() -> bool:
        return daemon_is_local()

    def detect(self) -> RunnerProbe:
        try:
            client = self._docker()
            version = client.version()
            self._info = client.info()
            image_id = dc.find_image(client, self.image)
        except SandboxUnavailable as exc:
            return RunnerProbe(self.name, False, exc.reason)
        except ConfigError as exc:
            return RunnerProbe(self.name, False, exc.message)
        details = {"docker_host": dc.docker_host(), "image": self.image, "image_id": image_id,
                   "daemon": self._info.get("Name"), "local": self.daemon_is_local(),
                   "memory_limit": bool(self._info.get("MemoryLimit")),
                   "pids_limit": bool(self._info.get("PidsLimit"))}
        reason = None
        if image_id is None:
            reason = dc.missing_image_reason(self.image)
        return RunnerProbe(self.name, image_id is not None, reason,
                           version=f"docker {version.get('Version', '?')}", details=details)

    # -- policy ----------------------------------------------------------------------
    def _spec(self, policy: SandboxPolicy) -> ContainerSpec:
        machine = str(self._info.get("Architecture") or platform.machine())
        return build_spec(policy, image=self.image, user=self.user, pids=self.pids,
                          memory=self.memory, machine=machine, own_tmp=self._keeps(policy),
                          placeholder_source=self._placeholder_source())

    def _placeholder_source(self) -> str | None:
        # A daemon elsewhere has only the placeholder's own path on its machine.
        if not self.daemon_is_local():
            return None
        if self._empty_source is None:
            self._empty_source = empty_source()
        return self._empty_source

    def _keeps(self, policy: SandboxPolicy) -> bool:
        """Is a container for ``policy`` kept between processes?  Only a local
        daemon's, without an allowlist proxy (the proxy and the secrets live in
        this process)."""
        return (self.keep_warm_s is not None and self.daemon_is_local()
                and not (policy.constrained and policy.network_allowlist is not None))

    def _gaps(self, policy: SandboxPolicy, spec: ContainerSpec) -> list[Gap]:
        """Each part of ``policy`` this daemon cannot hold."""
        return daemon_gaps(policy, spec, user=self.user, info=self._info, local=self.daemon_is_local())

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        gaps = self._gaps(policy, self._spec(policy))
        if not gaps:
            return Enforcement.full()
        return Enforcement.partial(gaps)

    @classmethod
    def prune(cls, *, everything: bool = False) -> list[str] | None:
        from dsh.runners.docker.prune import prune_containers

        return prune_containers(all=everything)

    def baseline(self, policy: SandboxPolicy, cwd: str) -> Baseline:
        """A fresh container per command, the way ``docker run`` is used without dsh."""
        import subprocess

        from dsh.sandbox.host_tools import system_tool

        # From the system search path (never the caller's), run with the fixed environment.
        docker = system_tool("docker")
        if docker is None:
            raise SandboxUnavailable("the docker CLI is not in /usr/sbin, /usr/bin, /sbin or /bin", runner=self.name)
        argv = [docker, "run", "--rm", "--network", "none", self.image, "true"]
        env = connection_env()
        return Baseline("docker run --rm true",
                        lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env), slow=True)

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        spec = self._spec(policy)
        rules, network, limits = plan_lines(policy, spec)
        if policy.constrained and policy.network_allowlist is not None:
            from dsh.runners.linux.net_namespace import plan_line

            network = plan_line(policy.network_allowlist)
        cannot = [*(g.reason for g in self._gaps(policy, spec)), *fixed_gaps(policy),
                  *self.limitations(policy).values()]
        return RunnerPlan(self.name, policy.mode, rules, network, limits, tuple(cannot))

    def limitations(self, policy: SandboxPolicy) -> Mapping[str, str]:
        return namespaced_limitations(self._spec(policy).seccomp_profile is not None)

    def reporting_gaps(self, policy: SandboxPolicy) -> Mapping[str, str]:
        return {cap.SIGNAL_STATUS.name: SIGNAL_STATUS_GAP}

    # -- network by allowlist -------------------------------------------------------
    def refuses_network_of(self, policy: SandboxPolicy) -> str | None:
        if not (policy.constrained and policy.network_allowlist is not None):
            return None
        from dsh.runners.docker.network import refusal

        return refusal(self.daemon_is_local())

    def _allowlist_proxy(self, policy: SandboxPolicy) -> Any:
        with self._lock:
            warm = self._warm.get(policy_key(policy))
        return None if warm is None else warm.proxy

    def network_mark(self, policy: SandboxPolicy) -> int:
        proxy = self._allowlist_proxy(policy)
        return 0 if proxy is None else int(proxy.refused)  # a new container's proxy counts from 0

    def network_refused(self, policy: SandboxPolicy, mark: int) -> tuple[str, ...]:
        proxy = self._allowlist_proxy(policy)
        if proxy is None:
            return ()
        from dsh.sandbox.net_proxy import refused_names

        return refused_names(proxy.refusals_since(mark))

    # -- commands --------------------------------------------------------------------
    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> RemoteLaunch:
        exact, decode = encode_argv(argv)
        spec = self._spec(policy)
        environment = container_env(text_env(env), spec)
        rules = policy.network_allowlist if policy.constrained else None
        if rules is not None:
            from dsh.runners.linux.net_namespace import proxy_env

            environment.update(proxy_env())
        if rules is not None and rules.secrets:
            from dsh.sandbox.net_secrets import values_in

            copied = values_in(rules.secrets, environment, os.environ)
            if copied is not None:
                raise SandboxUnavailable(f"the variable {copied[0]} holds the value of the secret {copied[1]}, "
                                         "which never enters the sandbox; nothing ran: stop passing it through",
                                         runner=self.name)
        cwd_path = Path(cwd)
        binds = [Path(m.target) for m in spec.mounts if m.kind == "bind"]
        if not cwd_path.is_absolute() or not any(b == cwd_path or b in cwd_path.parents
                                                  for b in binds):
            raise WorkdirError(f"cwd {cwd!r} is not inside the workspace or a writable root, "
                               "the only host paths the container sees")
        if self.daemon_is_local() and not cwd_path.is_dir():
            raise WorkdirError(f"cwd {cwd!r} is not a directory")
        with self.pinned(policy) as pins:
            # A daemon elsewhere resolves the names on its own machine: no pin reaches it.
            local = self.daemon_is_local()
            warm = self._ensure(policy_key(policy), spec, pinned_binds(spec, pins) if local else {},
                                pins if local else None, rules, str(policy.workspace))
        if warm.secrets is not None:
            # The placeholders win over a variable the profile passes through.
            environment.update(warm.secrets.environment())
        start = functools.partial(self._start, warm, exact, decode, cwd, environment)
        return RemoteLaunch(start=start)

    def _start(self, warm: Warm, argv: list[str], decode: bool, cwd: str,
               env: dict[str, str], stdin: bytes | StdinFeed | None, deadline: float | None) -> RemoteProcess:
        from docker.errors import DockerException  # type: ignore[import-untyped]
        from dsh.runners.docker.process import start_exec

        slot = warm.take_slot()
        try:
            return start_exec(self._docker().api, warm.id, argv, decode=decode, cwd=cwd, env=env,
                              user=self.user, stdin=stdin, slot=slot,
                              marker=uuid.uuid4().hex, on_release=functools.partial(self._released, warm),
                              on_unkillable=functools.partial(self._discard, warm))
        except DockerException as exc:
            self._released(warm, slot)
            raise SandboxUnavailable(f"cannot start the command in container {warm.name}"
                                     f"{limits_hint(warm.spec, exc)}: {exc}", runner=self.name) from None

    def _released(self, warm: Warm, slot: int) -> None:
        """A command of ``warm`` ended: a container of an older policy goes once idle."""
        warm.give_slot(slot)
        if warm.stale and warm.idle():
            self._discard(warm)

    def _current(self, warm: Warm) -> Warm:
        """``warm`` is the sandbox the next command uses; the others go once idle (``warm_pool``)."""
        return make_current(warm, self._warm.values(), self._lock, self._discard)

    def _ensure(self, key: tuple[object, ...], spec: ContainerSpec, expected: dict[str, tuple[int, int]],
                pins: PinnedPaths | None, rules: NetworkRules | None, workspace: str) -> Warm:
        client = self._docker()
        # One creator at a time: two racing prepares must not both create (the
        # loser's container would be orphaned until a prune).
        with self._create_lock:
            with self._lock:
                warm = self._warm.get(key)
            if warm is not None:
                try:
                    running = client.api.inspect_container(warm.id)["State"]["Running"]
                    if running and identities(warm.spec) == warm.pinned and warm.bound == expected:
                        return self._current(warm)
                except Exception:  # gone or unreadable: replace it
                    pass
                self._discard(warm)
            kept = self._kept_shape(client, spec, rules, workspace)
            warm = kept.adopt(expected) if kept is not None else None
            if warm is None:
                warm = self._create(client, spec, expected, pins, rules, kept)
            with self._lock:
                self._warm[key] = warm
            return self._current(warm)

    def _kept_shape(self, client: Any, spec: ContainerSpec, rules: NetworkRules | None,
                    workspace: str) -> KeptShape | None:
        """How a container of ``spec`` is kept between processes, or None if it is not (``_keeps``)."""
        if self.keep_warm_s is None or rules is not None or not self.daemon_is_local():
            return None
        if not labelable(workspace):
            return None  # a workspace a label cannot name gets a container of its own
        with self._lock:
            if self._parking is None:
                try:
                    self._parking = Parking(self.keep_warm_s)
                except DshError:
                    self.keep_warm_s = None  # no private place: containers go at close, as without keeping
                    return None
            parking = self._parking
        probed = self.probe().details.get("image_id")
        return KeptShape.of(client, parking, self._keeper, spec, workspace, self._made_placeholder,
                            probed if isinstance(probed, str) else None)

    def _create(self, client: Any, spec: ContainerSpec, expected: dict[str, tuple[int, int]],
                pins: PinnedPaths | None, rules: NetworkRules | None, kept: KeptShape | None = None) -> Warm:
        from docker.errors import DockerException

        # A container to keep is made from the image its shape names.
        image_id = kept.image_id if kept is not None else dc.find_image(client, spec.image)
        if image_id is None:
            raise SandboxUnavailable(dc.missing_image_reason(spec.image), runner=self.name)
        try:
            self._keeper.ensure_started()
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start the keeper that removes this session's containers "
                                     f"if this process dies: {exc}; nothing ran", runner=self.name) from None
        if not self._reaped:
            self._reaped = True
            # Containers of this user's sessions that died with their keeper.
            try:
                dc.reap_dead_owners(client)
                if kept is not None:
                    kept.parking.tidy(client)
            except (DockerException, OSError):
                pass  # a leftover stays for the next run or runners --prune; this run is unaffected
        # Held (shared) until the container exists: another session's cleanup
        # leaves a placeholder alone while a session is about to bind it.
        keys = None
        if rules is not None and rules.secrets:
            from dsh.runners.docker.secrets import make_secrets

            keys = make_secrets(rules, self.name)
        try:
            held = hold_placeholders(spec, pins, self._made_placeholder)
            try:
                return self._create_holding(client, image_id, spec, expected, rules, keys, kept)
            finally:
                for fd in held:
                    os.close(fd)
        except BaseException:
            if keys is not None:
                keys.remove()  # once: a container discarded meanwhile removed them already
            raise

    def _made_placeholder(self, path: str) -> None:
        with self._lock:
            self._placeholders.add(path)

    def _create_holding(self, client: Any, image_id: str, spec: ContainerSpec,
                        expected: dict[str, tuple[int, int]], rules: NetworkRules | None,
                        keys: ContainerSecrets | None, kept: KeptShape | None) -> Warm:
        from docker.errors import DockerException

        # Label every placeholder of this runner the container binds, so a prune
        # after a crash removes them even if an earlier container made them.
        with self._lock:
            ours = sorted(t for t in spec.placeholders if t in self._placeholders)
        # A container to keep is owned by its parking keeper, started first.
        keeper = kept.start_keeper() if kept is not None else None
        owner = dc.owner_labels(keeper.pid if keeper is not None else None)
        labels = {**owner, **(kept.labels() if keeper is not None and kept is not None else {}),
                  dc.LABEL_PLACEHOLDERS: json.dumps(ours),
                  dc.LABEL_PROTECTED: json.dumps([m.target for m in spec.mounts if m.kind == "bind" and m.read_only])}
        name = f"dsh-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        check_sources(spec, expected)
        pinned, pin_fds = pin_binds(spec)
        try:
            kwargs = spec.docker_kwargs()
            if keys is not None:
                kwargs["mounts"] = [*kwargs["mounts"], keys.mount()]  # the CA bundle, read-only
            container = client.containers.create(image_id, KEEPALIVE, name=name, labels=labels,
                                                 detach=True, **kwargs)
        except DockerException as exc:
            for fd in pin_fds:
                os.close(fd)
            if keeper is not None:
                keeper.close()  # it exits with no container to keep
            raise SandboxUnavailable(create_error(spec, exc), runner=self.name) from None
        warm = Warm(container.id, name, spec, pinned, pin_fds, dict(expected))
        warm.secrets = keys  # removed with the container (``_discard``)
        if keeper is not None and kept is not None:
            try:
                kept.hand_over(warm, keeper)
            except OSError:
                self._discard(warm)
                raise SandboxUnavailable(f"cannot hand container {name} to the keeper that removes it once "
                                         "idle; nothing ran (--keep-warm 0 makes containers that go at exit)",
                                         runner=self.name) from None
        try:
            self._keeper.add(container.id)
        except OSError as exc:
            self._discard(warm)
            raise SandboxUnavailable(f"cannot start the keeper that removes container {name} if this "
                                     f"process dies: {exc}; nothing ran", runner=self.name) from None
        started = time.time()
        try:
            container.start()
        except DockerException as exc:
            # runc may have bound a swapped name and made nested mount points there first.
            strays = after_failed_start(spec, expected, started)
            self._discard(warm)
            raise SandboxUnavailable(f"cannot start container {name} from {spec.image}"
                                     f"{limits_hint(spec, exc)}: {exc}"
                                     + "".join(f"; {note}" for note in strays), runner=self.name) from None
        if expected:
            pid = 0
            try:
                pid = client.api.inspect_container(container.id)["State"]["Pid"]
                check_container(pid, expected, functools.partial(stat_in, container),
                                functools.partial(mounts_in, container))
            except DockerException as exc:
                self._discard(warm)
                raise SandboxUnavailable(f"cannot check the binds of container {name}: {exc}",
                                         runner=self.name) from None
            except SandboxUnavailable as exc:
                # A swapped bind: runc made its nested mount points in the
                # directory it bound instead, outside every root.
                refusal = take_back_from(exc, container, pid, spec, expected, started)
                self._discard(warm)
                raise refusal from None
            except BaseException:
                self._discard(warm)
                raise
        missing = dc.missing_tools(container)
        if missing:
            self._discard(warm)
            raise SandboxUnavailable(
                f"image {spec.image} lacks {missing}, which the runner needs (its keep-alive and kill "
                "script); add them to the image (Debian: apt-get install bash coreutils) or use "
                "the default image (dsh-sandbox image build)", runner=self.name)
        if rules is not None:
            self._attach_proxy(client, warm, rules)
        return warm

    def _attach_proxy(self, client: Any, warm: Warm, rules: NetworkRules) -> None:
        from docker.errors import DockerException
        from dsh.runners.docker.network import attach_proxy

        try:
            keys = warm.secrets
            warm.proxy = attach_proxy(client.api, warm.id, self.user, rules, self._proxy_resolver,
                                      secrets=keys.secrets if keys is not None else None,
                                      ca=keys.ca if keys is not None else None, upstream_tls=self._proxy_upstream_tls)
        except (OSError, DockerException) as exc:
            self._discard(warm)
            raise SandboxUnavailable(f"cannot put the allowlist proxy in container {warm.name}: {exc}; nothing "
                                     "ran (the network is never opened instead)", runner=self.name) from None
        except BaseException:
            self._discard(warm)
            raise

    def _let_go(self, warm: Warm) -> None:
        """No later command of this process uses ``warm``: the pins it held go."""
        with self._lock:
            for key, value in list(self._warm.items()):
                if value is warm:
                    del self._warm[key]
        for fd in warm.pin_fds:
            os.close(fd)
        warm.pin_fds = []

    def _discard(self, warm: Warm) -> None:
        """Remove one container.

        Placeholders stay until ``close()``: a container made next may rely on
        them, and removing a bind's mountpoint on the host would silently detach
        it in a container still running.
        """
        self._let_go(warm)
        client = self._client
        try:
            if client is not None:
                dc.remove_container(client, warm.id)
                self._keeper.forget(warm.id)
        finally:
            if warm.lease is not None or warm.keeper_fd != -1:
                release_kept(warm, self._parking)
            proxy, warm.proxy = warm.proxy, None
            if proxy is not None:
                proxy.close()
            keys, warm.secrets = warm.secrets, None
            if keys is not None:
                keys.remove()

    def _park(self, warm: Warm) -> bool:
        """Leave ``warm`` to its parking keeper for the next process; False if it is not kept."""
        if self.keep_warm_s is None or self._client is None:
            return False
        return park(warm, self._client, self._keeper, self._let_go)

    def close(self) -> None:
        with self._lock:
            warm = list(self._warm.values())
        for item in warm:
            if not self._park(item):
                self._discard(item)
        with self._lock:
            client, self._client = self._client, None
            placeholders, self._placeholders = sorted(self._placeholders), set()
            parking, self._parking = self._parking, None
        self._keeper.close()
        if parking is not None:
            parking.close()
        if client is not None:
            dc.remove_placeholders(client, placeholders)
            client.close()
