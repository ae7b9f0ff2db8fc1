"""The classic BPF compiler for ``seccomp.rules`` and its installer.

``compile_bpf`` renders rules (see ``seccomp`` for their semantics) as a
program for one architecture: the ``arch`` check first (a foreign ABI kills
the process), then one block per syscall whose rules are tried in order.
``install`` puts a program on the calling thread; ``to_sock_filter_bytes``
is what ``bwrap --seccomp FD`` reads.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dsh.runners.linux.syscalls import Arch

if TYPE_CHECKING:
    from dsh.runners.linux.seccomp import Action, Rule

# -- the classic BPF compiler ------------------------------------------------

Instruction = tuple[int, int, int, int]  # struct sock_filter: code, jt, jf, k

_LD_W_ABS = 0x20
_ALU_AND_K = 0x54
_JA = 0x05
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
# struct seccomp_data: nr, arch, instruction_pointer, args[6] (little endian
# on both supported arches: the low half of args[i] is at 16 + 8 * i).
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARGS = 16
_X32_SYSCALL_BIT = 0x40000000


class _Program:
    """A tiny assembler: instructions with symbolic forward jump targets."""

    def __init__(self) -> None:
        self._ops: list[tuple[int, str | int, str | int, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self._labels[name] = len(self._ops)

    def op(self, code: int, k: int, if_true: str | int = 0, if_false: str | int = 0) -> None:
        self._ops.append((code, if_true, if_false, k))

    def assemble(self) -> tuple[Instruction, ...]:
        return tuple(
            (code, self._offset(i, jt), self._offset(i, jf), k) for i, (code, jt, jf, k) in enumerate(self._ops)
        )

    def _offset(self, index: int, target: str | int) -> int:
        if isinstance(target, int):
            return target  # relative already (0 = next instruction)
        delta = self._labels[target] - index - 1
        if not 0 <= delta <= 255:
            raise ValueError(f"BPF jump to {target} out of range")
        return delta


def _ret(action: Action) -> int:
    return _RET_ALLOW if action.kind == "allow" else _RET_ERRNO | (action.errno & 0xFFFF)


def _grouped(ruleset: Sequence[Rule]) -> dict[str, list[Rule]]:
    groups: dict[str, list[Rule]] = {}
    for rule in ruleset:
        groups.setdefault(rule.syscall, []).append(rule)
    return groups


def compile_bpf(ruleset: Sequence[Rule], arch: Arch) -> tuple[Instruction, ...]:
    """The rules as a classic BPF program for ``arch``; unknown syscall names raise."""
    p = _Program()
    # The kills come first: a jump to the end of a long program is out of range.
    p.op(_LD_W_ABS, _OFF_ARCH)
    p.op(_JEQ_K, arch.audit_arch, 1, 0)
    p.op(_RET_K, _RET_KILL_PROCESS)
    p.op(_LD_W_ABS, _OFF_NR)
    if arch.has_x32:
        p.op(_JGE_K, _X32_SYSCALL_BIT, 0, 1)
        p.op(_RET_K, _RET_KILL_PROCESS)
    for g, (name, group) in enumerate(_grouped(ruleset).items()):
        nr = arch.number(name)
        if nr is None:
            continue
        p.op(_JEQ_K, nr, 0, f"g{g}")
        for r, rule in enumerate(group):
            miss = f"g{g}r{r}"
            for arg in rule.args:
                p.op(_LD_W_ABS, _OFF_ARGS + 8 * arg.index)
                if arg.mask != 0xFFFFFFFF:
                    p.op(_ALU_AND_K, arg.mask)
                hit, other = (0, miss) if arg.op == "eq" else (miss, 0)
                p.op(_JEQ_K, arg.value & 0xFFFFFFFF, hit, other)
            p.op(_RET_K, _ret(rule.action))
            p.label(miss)
        p.op(_RET_K, _RET_ALLOW)
        p.label(f"g{g}")
    p.op(_RET_K, _RET_ALLOW)
    return p.assemble()


def to_sock_filter_bytes(program: Sequence[Instruction]) -> bytes:
    """The program as an array of ``struct sock_filter`` (what ``bwrap --seccomp FD`` reads)."""
    return b"".join(struct.pack("=HBBI", *ins) for ins in program)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def _prctl_checked(option: int, arg2: int, arg3: ctypes._Pointer[_SockFprog] | None, what: str) -> None:
    third = arg3 if arg3 is not None else ctypes.c_ulong(0)
    if _prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), third, ctypes.c_ulong(0), ctypes.c_ulong(0)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def set_no_new_privs() -> None:
    """``prctl(PR_SET_NO_NEW_PRIVS, 1)``: per thread, inherited, irreversible."""
    _prctl_checked(_PR_SET_NO_NEW_PRIVS, 1, None, "prctl(PR_SET_NO_NEW_PRIVS)")


def install(program: Sequence[Instruction]) -> None:
    """Install ``program`` on the calling thread only (no TSYNC); needs no_new_privs first.

    Every process the thread forks afterwards inherits the filter.
    """
    array = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    _prctl_checked(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.pointer(fprog), "prctl(PR_SET_SECCOMP)")
