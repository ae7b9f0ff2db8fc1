"""The Docker profile refuses exactly what the first-match rules refuse (pure: no daemon).

The daemon tests show libseccomp applies the profile; this one walks many
argument vectors (high halves set included) through both readings.
"""

from __future__ import annotations

import itertools
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from dsh.runners.linux import seccomp
from dsh.runners.linux.seccomp_docker import CONTAINER_SYSCALLS, DOCKER_BASELINE, container_profile, render_profile

_OPS: dict[str, Callable[[int, int, int], bool]] = {
    "SCMP_CMP_NE": lambda a, v, _: a != v,
    "SCMP_CMP_LT": lambda a, v, _: a < v,
    "SCMP_CMP_GT": lambda a, v, _: a > v,
    "SCMP_CMP_MASKED_EQ": lambda a, v, d: (a & v) == d,
}


def first_match(rules: tuple[seccomp.Rule, ...], name: str, args: tuple[int, ...]) -> int:
    for rule in rules:
        if rule.syscall != name:
            continue
        held = all(((args[a.index] & a.mask) == (a.value & a.mask)) == (a.op == "eq") for a in rule.args)
        if held:
            return 0 if rule.action.kind == "allow" else rule.action.errno
    return 0


def profile_result(profile: dict[str, Any], name: str, args: tuple[int, ...]) -> int:
    for entry in profile["syscalls"]:
        conditions = entry.get("args", [])
        if name in entry["names"] and all(
            _OPS[c["op"]](args[c["index"]], c["value"], c["valueTwo"]) for c in conditions
        ):
            return int(entry["errnoRet"])
    return 0


HIGH = 1 << 32
VALUES = [0, 1, 2, 3, 5, 8, 9, 10, 15, 16, 40, 45, 46, 64, 0x541C, 0x5412, 0x40086602, 0xFFFFFFFF]
FIRST = [*VALUES, HIGH | 16, HIGH | 40, HIGH | 2]
SETUID, SETGID = 0o4755, 0o2755
SECOND = [0, 1, 2, 5, 0x80801, 0x5412, 0x40087602, 0x40047602, 1024, SETUID, SETGID]
VECTORS = list(itertools.product(FIRST, SECOND, [0, 9, 15, SETUID, SETGID], [0, SETUID]))


@pytest.mark.parametrize(
    "syscalls",
    [CONTAINER_SYSCALLS, seccomp.SyscallPolicy(private_network=True, unix_sockets=True), seccomp.SyscallPolicy()],
    ids=["container", "unix-sockets", "host-namespaces"],
)
def test_profile_refuses_what_the_rules_refuse(syscalls: seccomp.SyscallPolicy) -> None:
    rules = (*seccomp.rules(syscalls), *DOCKER_BASELINE)
    profile = json.loads(render_profile(rules, seccomp.native_arch()))
    names = {r.syscall for r in rules}
    wrong = []
    for name in sorted(names):
        for vector in VECTORS:
            want = first_match(rules, name, tuple(v & 0xFFFFFFFF for v in vector))
            got = profile_result(profile, name, vector)
            # A set high half may only make the profile stricter, never looser.
            if got != want and not (got and vector[0] >= HIGH):
                wrong.append((name, vector, want, got))
    assert wrong == []


def test_profile_for_an_unknown_machine_is_none() -> None:
    assert container_profile("mips") is None
    assert container_profile(seccomp.native_arch().name) is not None


def test_vsock_and_unix_are_refused_inet_allowed() -> None:
    profile = json.loads(container_profile(seccomp.native_arch().name) or "{}")
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"

    def refuse(*args: int) -> int:
        return profile_result(profile, "socket", args)

    assert refuse(socket.AF_VSOCK, 1, 0) and refuse(socket.AF_UNIX, 1, 0) and refuse(socket.AF_NETLINK, 3, 15)
    assert not refuse(socket.AF_INET, 1, 0) and not refuse(socket.AF_INET6, 2, 0) and not refuse(16, 3, 0)
    assert refuse(HIGH | socket.AF_VSOCK, 1, 0)
