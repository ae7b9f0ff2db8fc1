"""The shared seccomp rules rendered as a Docker (OCI) seccomp profile.

The rule model is first-match per syscall (``ALLOW`` exceptions before a
refusal); libseccomp, which Docker feeds the profile to, has no rule order.  So
the profile allows by default and lists only refusals, each already excluding
the exceptions before it: ``socket`` "allow AF_INET, AF_INET6, route netlink,
else EACCES" becomes "EACCES if the family is none of those, or netlink with
another protocol".  A negation is spelt without two comparisons on one
argument (libseccomp refuses that): by the values of a masked field, or by the
gaps between the allowed values plus ``>`` the largest.

Comparisons use ``SCMP_CMP_MASKED_EQ`` with the argument's mask (32 bits at
most): the rules look at ``int`` arguments, the kernel ignores the high half of
those registers, so a comparison of all 64 bits could be dodged by setting it.
Only the native architecture is listed: a foreign ABI (i386, x32) gets
libseccomp's bad-architecture action, as the BPF compiler kills it.

Docker's default profile is replaced by this one, so what it gives a container
without capabilities is kept: no namespaces (``unshare``, ``setns``, namespace
flags of ``clone``; ``clone3`` ENOSYS so libc falls back to ``clone``) and no
mount API come with the shared rules, as for every Linux runner; the rest
(``DOCKER_BASELINE``) refuses ``bpf``,
``perf_event_open``, ``userfaultfd``, ``fanotify_init``, ``kcmp``,
``pidfd_getfd``, ``process_madvise``, ``personality`` flags beyond PER_LINUX32 and UNAME26.
The rest of it guards syscalls that need a capability the container does not
have (``cap_drop=ALL``).
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dsh.runners.linux.seccomp import Arg, Rule, SyscallPolicy, refuse, rules
from dsh.runners.linux.syscalls import ARCHES, Arch

_EPERM = refuse(errno.EPERM)
#: personality(): PER_LINUX with at most PER_LINUX32 (0x8) and UNAME26 (0x20000), as Docker allows;
#: any other bit (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE...) is refused.
_PERSONALITY_BITS = 0x20008

# Namespaces and the mount API come from the shared rules (``namespace_rules``).
DOCKER_BASELINE: tuple[Rule, ...] = (
    *(Rule(name, _EPERM) for name in (
        "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "kcmp", "pidfd_getfd", "process_madvise",
        "lookup_dcookie", "quotactl", "syslog", "acct",
    )),
    *(Rule("personality", _EPERM, (Arg(0, 1 << bit, mask=1 << bit),))
      for bit in range(32) if not _PERSONALITY_BITS & (1 << bit)),
)  # fmt: skip

_FULL = 0xFFFFFFFF
_MAX_ENUMERATED = 256


@dataclass(frozen=True)
class _Atom:
    index: int
    mask: int
    value: int
    eq: bool

    def negated(self) -> _Atom:
        return _Atom(self.index, self.mask, self.value, not self.eq)


def _atoms(rule: Rule) -> list[_Atom]:
    return [_Atom(a.index, a.mask, a.value & a.mask, a.op == "eq") for a in rule.args]


def _cmp(index: int, op: str, value: int, value_two: int = 0) -> dict[str, object]:
    return {"index": index, "value": value, "valueTwo": value_two, "op": op}


def _exclusions(index: int, mask: int, excluded: set[int]) -> list[list[dict[str, object]]]:
    """Alternatives (one comparison each) for "(arg & mask) not in excluded"."""
    if mask != _FULL:
        if mask >= _MAX_ENUMERATED:
            raise ValueError(f"cannot negate a comparison under mask {mask:#x}")
        values = {v & mask for v in range(mask + 1)} - excluded
        return [[_cmp(index, "SCMP_CMP_MASKED_EQ", mask, v)] for v in sorted(values)]
    if len(excluded) == 1:
        # The high half is not masked here: a value with it set is refused too.
        return [[_cmp(index, "SCMP_CMP_NE", next(iter(excluded)))]]
    low, high = min(excluded), max(excluded)
    gaps = sorted(set(range(low, high)) - excluded)
    if len(gaps) > _MAX_ENUMERATED:
        raise ValueError("too many values to enumerate between the allowed ones")
    out = [[_cmp(index, "SCMP_CMP_LT", low)]] if low > 0 else []
    out += [[_cmp(index, "SCMP_CMP_MASKED_EQ", _FULL, v)] for v in gaps]
    out.append([_cmp(index, "SCMP_CMP_GT", high)])
    return out


def _conjunction(atoms: Iterable[_Atom]) -> list[list[dict[str, object]]] | None:
    """Comparison lists (alternatives) for a conjunction of atoms; ``None`` if unsatisfiable."""
    by_index: dict[int, list[_Atom]] = {}
    for atom in atoms:
        by_index.setdefault(atom.index, []).append(atom)
    per_index: list[list[list[dict[str, object]]]] = []
    for index, group in sorted(by_index.items()):
        eqs = {(a.mask, a.value) for a in group if a.eq}
        nes = [a for a in group if not a.eq]
        if len(eqs) > 1:
            return None  # two different required values (same mask in every rule we render)
        if eqs:
            mask, value = next(iter(eqs))
            if any(n.mask == mask and n.value == value for n in nes):
                return None
            if any(n.mask != mask for n in nes):
                raise ValueError(f"mixed masks on argument {index}")
            per_index.append([[_cmp(index, "SCMP_CMP_MASKED_EQ", mask, value)]])
            continue
        masks = {n.mask for n in nes}
        if len(masks) != 1:
            raise ValueError(f"mixed masks on argument {index}")
        per_index.append(_exclusions(index, masks.pop(), {n.value for n in nes}))
    return [list(itertools.chain.from_iterable(choice)) for choice in itertools.product(*per_index)]


def _group_refusals(group: Sequence[Rule]) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = []
    allows: list[list[_Atom]] = []
    for rule in group:
        if rule.action.kind == "allow":
            allows.append(_atoms(rule))
            continue
        # Refused when the rule matches and no earlier exception did.  not(A and B)
        # is spelt (not A) or (A and not B): disjoint alternatives, because
        # libseccomp mis-merges rules whose ranges overlap on one argument.
        disjoint = [[[*allow[:j], allow[j].negated()] for j in range(len(allow))] for allow in allows]
        for choice in itertools.product(*disjoint):
            negations = list(itertools.chain.from_iterable(choice))
            alternatives = _conjunction([*_atoms(rule), *negations])
            for args in alternatives or []:
                entry: dict[str, object] = {
                    "names": [rule.syscall],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": rule.action.errno,
                }
                if args:
                    entry["args"] = args
                entries.append(entry)
    return entries


_SCMP_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}

#: A container as the filter sees it: its own network (loopback only, or the
#: host's with network_mode=host: IP either way, never the host's unix
#: sockets), pid and IPC namespaces.
CONTAINER_SYSCALLS = SyscallPolicy(network=False, private_network=True, private_pid=True, private_ipc=True)


@functools.cache
def container_profile(machine: str) -> str | None:
    """The profile for a daemon on ``machine`` (``uname -m``); ``None`` when no table exists for it."""
    arch = ARCHES.get(machine)
    if arch is None:
        return None
    return render_profile((*rules(CONTAINER_SYSCALLS), *DOCKER_BASELINE), arch)


def render_profile(ruleset: Sequence[Rule], arch: Arch) -> str:
    """A Docker seccomp profile (JSON) refusing what ``ruleset`` refuses, first match first."""
    groups: dict[str, list[Rule]] = {}
    for rule in ruleset:
        groups.setdefault(rule.syscall, []).append(rule)
    unique = {json.dumps(e, sort_keys=True): e for g in groups.values() for e in _group_refusals(g)}
    syscalls = list(unique.values())
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [_SCMP_ARCH[arch.name]],
        "syscalls": syscalls,
    }
    return json.dumps(profile, separators=(",", ":"), sort_keys=True)
