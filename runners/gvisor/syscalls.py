"""The filter each command installs in gVisor's kernel before it starts.

gVisor's kernel answers every system call, so the host-kernel surfaces the
shared Linux rules close (keyrings, io_uring, netlink, other processes) are
its own here.  What still reaches the host is a file's mode through the
gofer: a root caller's command (uid 0 without capabilities) may ``chmod u+s``
a file it owns in a writable root, and the gofer applies that to the host's
file, a setuid-root program left for other users.  This runsc applies no OCI
seccomp filter to ``runsc exec``'s processes, so the launcher installs one
itself (gVisor runs classic BPF filters for its processes): the shared rules'
setuid/setgid refusals (chmod family; open, creat, mknod modes; ``openat2``,
whose mode sits behind a pointer, is ENOSYS).

(A runsc from before 2023 refuses ``AT_NO_AUTOMOUNT`` with EINVAL in
``statx`` and in ``newfstatat`` alike, so answering ``statx`` ENOSYS to make
glibc fall back does not help: ``ls -l`` stays broken there; ``explain`` says so.)

The launcher is Python (the interpreter running dsh, which the sandbox sees
read-only with the rest of the host): ctypes, ``prctl(PR_SET_SECCOMP)``,
``execv``.  It exits 125 with a message if the filter cannot be installed:
nothing runs without it.
"""

from __future__ import annotations

from dsh.runners.linux.bpf import compile_bpf, to_sock_filter_bytes
from dsh.runners.linux.seccomp import ENOSYS, EPERM, Arg, Rule, native_arch

_SETID_BITS = (0o4000, 0o2000)  # S_ISUID, S_ISGID
# (syscall, index of its mode argument), as the shared rules refuse them.
_MODE_ARGS = (("chmod", 1), ("fchmod", 1), ("fchmodat", 2), ("fchmodat2", 2), ("open", 2), ("openat", 3),
              ("creat", 1), ("mknod", 1), ("mknodat", 2))  # fmt: skip
LAUNCH_FAILED = 125

LAUNCHER = (
    "import ctypes,os,sys\n"
    "f=bytes.fromhex(sys.argv[1])\n"
    "class P(ctypes.Structure):_fields_=[('n',ctypes.c_ushort),('f',ctypes.c_void_p)]\n"
    "b=ctypes.create_string_buffer(f,len(f))\n"
    "p=P(len(f)//8,ctypes.cast(b,ctypes.c_void_p))\n"
    "c=ctypes.CDLL(None,use_errno=True)\n"
    "if c.prctl(38,1,0,0,0) or c.prctl(22,2,ctypes.byref(p),0,0):\n"
    " sys.stderr.write('dsh-sandbox: cannot install the syscall filter: '+os.strerror(ctypes.get_errno())+chr(10))\n"
    f" os._exit({LAUNCH_FAILED})\n"
    "os.execv(sys.argv[2],sys.argv[2:])\n"
)


def rules() -> tuple[Rule, ...]:
    out = [Rule(name, EPERM, (Arg(index, bit, mask=bit),)) for name, index in _MODE_ARGS for bit in _SETID_BITS]
    out.append(Rule("openat2", ENOSYS))
    return tuple(out)


def filter_hex() -> str:
    """The filter for this machine as hex (raises ``UnsupportedArch`` where there is no table)."""
    return to_sock_filter_bytes(compile_bpf(rules(), native_arch())).hex()
