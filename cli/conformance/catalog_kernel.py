"""Scenarios for what root, the kernel's tunables and process control give a command.

Capabilities, writable kernel tunables, device nodes, inode flags, socket
families without a namespace (vsock, netlink), io_uring, cgroup escapes, and
every syscall that changes another process (prlimit, setpriority, ioprio,
sched_*, ptrace, process_vm, pidfd) aimed at a fresh host victim and at the
supervising process.  Verdicts are host state after the run, except where an
attempt would be destructive (opening a tunable for writing stands in for
writing it), which the purpose says.
"""

from __future__ import annotations

import os

from dsh.cli.conformance import checks as c
from dsh.cli.conformance import hostile as h
from dsh.cli.conformance.catalog_host import LIBC, py
from dsh.cli.conformance.model import Check, Expect, HostEnv, RunOutput, Scenario, Setup, Unavailable

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
PY = ("python3",)
MARK = "exec -a dshconf-{nonce} sleep 300"
SYSCALLS = ("import platform\nNR = {{'x86_64': {{'ioprio_set': 251, 'process_vm_readv': 310, 'pidfd_open': 434,"
            " 'pidfd_send_signal': 424, 'io_uring_setup': 425}}, 'aarch64': {{'ioprio_set': 30,"
            " 'process_vm_readv': 270, 'pidfd_open': 434, 'pidfd_send_signal': 424, 'io_uring_setup': 425}}"
            "}}[platform.machine()]\nlong = ctypes.c_long\nL.syscall.restype = long\n")
# Open for writing every kernel tunable reachable (opening stores nothing).  A
# tunable that belongs to a namespace the command has of its own (its IPC
# limits, its network stack, its hostname) is no host resource: skipped when the
# namespace differs from the host's ({host_ns} is the host's inode per kind).
TUNABLES = (
    "import os\nn, hits = 0, []\nhost = {host_ns}\n"
    "own = {{k for k in host if os.stat(f'/proc/self/ns/{{k}}').st_ino != host[k]}}\n"
    "per_ns = {{'ipc': ('/proc/sys/fs/mqueue/', '/proc/sys/kernel/shm', '/proc/sys/kernel/msg',"
    " '/proc/sys/kernel/sem', '/proc/sys/kernel/auto_msgmni'), 'net': ('/proc/sys/net/',),"
    " 'uts': ('/proc/sys/kernel/hostname', '/proc/sys/kernel/domainname'),"
    " 'pid': ('/proc/sys/kernel/ns_last_pid',), 'user': ('/proc/sys/user/',)}}\n"
    "import platform\nif tuple(map(int, platform.release().split('.')[:2])) >= (6, 14):\n"
    "    per_ns['pid'] += ('/proc/sys/kernel/pid_max',)  # per pid namespace since Linux 6.14\n"
    "private = tuple(p for k in own for p in per_ns[k])\n"
    "tops = ['/proc/sys', '/proc/irq', '/proc/bus', '/sys/kernel', '/sys/power', '/sys/module', '/sys/fs',"
    " '/sys/block', '/sys/devices/system', '/sys/firmware']\n"
    "files = ['/proc/sysrq-trigger', '/proc/kcore', '/proc/kmsg']\n"
    "for top in tops:\n"
    "    for d, _, fs in os.walk(top):\n"
    "        files += [os.path.join(d, f) for f in fs]\n"
    "for f in files[:60000]:\n"
    "    if f.startswith(private): continue\n"
    "    try: os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY))\n"
    "    except OSError: continue\n"
    "    n += 1; hits.append(f)\n"
    "print('WRITABLE', n, hits[:8])\n"
)
NAMESPACES = ("ipc", "net", "uts", "pid", "user")


def _host_namespaces(env: HostEnv) -> None:
    env.extra["host_ns"] = repr({k: os.stat(f"/proc/self/ns/{k}").st_ino for k in NAMESPACES})


def _no_capabilities(env: HostEnv, out: RunOutput) -> str | None:
    fields = dict(line.split(":", 1) for line in out.stdout.decode(errors="replace").splitlines() if ":" in line)
    if "CapEff" not in fields:
        return f"no capability report: {out.stdout[:200]!r}"
    held = [name for name in ("CapEff", "CapPrm", "CapInh", "CapAmb") if int(fields.get(name, "0"), 16)]
    uid = fields.get("Uid", "").split()
    if uid and uid[0] == "0" and int(fields.get("CapBnd", "0"), 16):
        held.append("CapBnd (as uid 0)")
    shown = ", ".join(f"{n}={fields[n.split()[0]].strip()}" for n in held)
    return f"capabilities left inside: {shown}" if held else None


def _no_writable_tunables(env: HostEnv, out: RunOutput) -> str | None:
    line = next((ln for ln in out.stdout.decode(errors="replace").splitlines() if ln.startswith("WRITABLE")), "")
    if not line:
        return f"the probe did not finish: exit={out.exit_code}"
    return None if line.startswith("WRITABLE 0 ") else f"kernel tunables open for writing: {line[9:300]}"


def _owner_and_mode(template: str) -> tuple[Setup, Check]:
    def setup(env: HostEnv) -> None:
        c.make_file(template)(env)
        st = os.stat(env.fmt(template))
        env.extra["_owner"] = (st.st_uid, st.st_gid, st.st_mode)

    def check(env: HostEnv, out: RunOutput) -> str | None:
        st = os.stat(env.fmt(template))
        now = (st.st_uid, st.st_gid, st.st_mode)
        return None if now == env.extra["_owner"] else f"owner/mode changed {env.extra['_owner']} -> {now}"

    return setup, check


def _two_cpus(env: HostEnv) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        raise Unavailable("one CPU: an affinity change would not show")
    h.victim(env)


def victim(sid: str, purpose: str, code: str, covers: tuple[str, ...] = ("process-control",),
           setup: Setup = h.victim) -> Scenario:
    return Scenario(sid, "process-control", purpose, py(LIBC, SYSCALLS, code), BLOCKED, setup=setup,
                    check_blocked=h.victim_unchanged, covers=covers, requires=PY)


_chown_setup, _chown_check = _owner_and_mode("{outside}/victim")
_flags_setup = c.sequence(c.make_file("{outside}/victim"), h.inode_flags("{outside}/victim"))

SCENARIOS: tuple[Scenario, ...] = (
    # -- root, capabilities and kernel tunables ---------------------------------------------
    Scenario("kern-capabilities", "root", "no capability is left (effective, permitted, inheritable, ambient; "
             "bounding too when uid 0)", ("sh", "-c", "grep -E '^(Uid|Cap[A-Za-z]+):' /proc/self/status"), BLOCKED,
             check_blocked=_no_capabilities, judged_inside=True),
    Scenario("kern-sysctl-write", "root", "change a host-global sysctl through /proc/sys",
             ("sh", "-c", "v=$(cat /proc/sys/kernel/printk_ratelimit_burst);"
                          " echo $((v + 7)) > /proc/sys/kernel/printk_ratelimit_burst"), BLOCKED,
             setup=h.sysctl, check_blocked=h.sysctl_unchanged),
    Scenario("kern-writable-tunables", "root", "no kernel tunable opens for writing (/proc/sys, sysrq-trigger, "
             "/proc/irq, /proc/bus, /sys; opening stands in for writing)", py(TUNABLES), BLOCKED,
             setup=_host_namespaces, check_blocked=_no_writable_tunables, requires=PY, timeout_ms=60_000,
             judged_inside=True),
    Scenario("kern-mknod", "root", "create a device node (here /dev/mem's) in the workspace and read it",
             py("import os, stat\nos.mknod('{ws}/mem', 0o666 | stat.S_IFCHR, os.makedev(1, 1))\n"
                "print(os.pread(os.open('{ws}/mem', os.O_RDONLY), 16, 0x100000).hex())\n"), BLOCKED,
             check_blocked=c.absent("{ws}/mem"), requires=PY),
    Scenario("kern-chown-outside", "root", "chown and chmod 4777 a host file outside the roots",
             ("sh", "-c", "chown 65534:65534 {outside}/victim; chmod 4777 {outside}/victim"), BLOCKED,
             setup=_chown_setup, check_blocked=_chown_check, covers=("metadata",)),
    Scenario("kern-inode-flags", "inode", "set inode flags on a host file (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR)",
             py("import fcntl, os, struct\nfd = os.open('{outside}/victim', os.O_RDONLY)\n"
                "f = struct.unpack('l', fcntl.ioctl(fd, 0x80086601, bytes(8)))[0]\n"
                "try: fcntl.ioctl(fd, 0x40086602, struct.pack('l', f | 0x40))\nexcept OSError as e: print(e)\n"
                "x = bytearray(fcntl.ioctl(fd, 0x801C581F, bytes(28)))\nx[0] |= 0x80\n"
                "try: fcntl.ioctl(fd, 0x401C5820, bytes(x))\nexcept OSError as e: print(e)\n"), BLOCKED,
             setup=_flags_setup, check_blocked=h.inode_flags_unchanged("{outside}/victim"), covers=("metadata",),
             requires=PY),
    Scenario("kern-cgroup-escape", "cgroup", "move into a host cgroup (or make one) and leave a daemon behind",
             ("bash", "-c", "for p in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do"
                            " echo $$ > $p 2>/dev/null; done; mkdir /sys/fs/cgroup/dshconf-{nonce}"
                            " /sys/fs/cgroup/*/dshconf-{nonce} 2>/dev/null; setsid -f bash -c '" + MARK + "'; true"),
             BLOCKED, setup=lambda e: e.cleanups.append(lambda: h.kill_marked(e)),
             check_blocked=c.all_of(c.no_process_left, h.no_cgroup_dir), covers=("process-escape",)),
    # -- socket families and io_uring ----------------------------------------------------------
    Scenario("net-vsock", "network", "open an AF_VSOCK socket (not namespaced: it reaches the hypervisor host)",
             py(LIBC, "s = socket.socket(40, socket.SOCK_STREAM)\nprint('OPENED')\n"), BLOCKED,
             check_blocked=lambda e, o: "an AF_VSOCK socket was opened" if b"OPENED" in o.stdout else None,
             covers=("socket-families",), requires=PY, judged_inside=True),
    # NETLINK_ROUTE (0) only sees the command's own network namespace where it has one
    # (bwrap, docker), so it may stay open there; these protocols reach host state.
    Scenario("net-netlink", "network", "open netlink sockets that reach host state (uevent, audit, sock_diag)",
             py(LIBC, "ok = []\nfor proto in (15, 9, 4):\n    try: socket.socket(socket.AF_NETLINK,"
                      " socket.SOCK_RAW, proto); ok.append(proto)\n    except OSError: pass\nprint('OPENED', ok)\n"),
             BLOCKED, check_blocked=lambda e, o: None if b"OPENED []" in o.stdout or b"OPENED" not in o.stdout
             else f"netlink sockets opened: {o.stdout.strip().decode(errors='replace')}",
             covers=("socket-families",), requires=PY, judged_inside=True),
    Scenario("kern-io-uring", "kernel", "set up an io_uring (its operations bypass seccomp filters)",
             py(LIBC, SYSCALLS, "p = ctypes.create_string_buffer(120)\nfd = L.syscall(long(NR['io_uring_setup']),"
                                " long(4), p)\nprint('URING', fd)\n"), BLOCKED,
             check_blocked=lambda e, o: None if b"URING -1" in o.stdout or b"URING" not in o.stdout
             else "io_uring_setup succeeded", covers=("io-uring",), requires=PY, judged_inside=True),
    # -- process control of a host victim and of the supervisor ---------------------------------
    victim("proc-prlimit-victim", "lower a host process's limits (prlimit)",
           "import resource\nresource.prlimit({victim}, resource.RLIMIT_NOFILE, (64, 64))\n"),
    victim("proc-setpriority-victim", "renice a host process", "os.setpriority(os.PRIO_PROCESS, {victim}, 19)\n"),
    victim("proc-ioprio-victim", "set a host process's I/O priority to idle",
           "print(L.syscall(long(NR['ioprio_set']), long(1), long({victim}), long(3 << 13)))\n"),
    victim("proc-affinity-victim", "pin a host process to one CPU",
           "os.sched_setaffinity({victim}, {{0}})\n", setup=_two_cpus),
    victim("proc-sched-victim", "move a host process to SCHED_IDLE",
           "os.sched_setscheduler({victim}, os.SCHED_IDLE, os.sched_param(0))\n"),
    victim("proc-ptrace-victim", "ptrace-attach a host process (and leave it stopped)",
           "print(L.ptrace(long(16), long({victim}), None, None))\nimport time\ntime.sleep(0.3)\n"),
    victim("proc-pidfd-kill", "kill a host process through a pidfd",
           "fd = L.syscall(long(NR['pidfd_open']), long({victim}), long(0))\n"
           "print(L.syscall(long(NR['pidfd_send_signal']), long(fd), long(9), None, long(0)))\n",
           covers=("signal-scope", "no-scopes")),
    Scenario("proc-process-vm", "process-control", "read a host process's memory (process_vm_readv)",
             py(LIBC, SYSCALLS,
                "lo, hi = next(map(lambda l: [int(x, 16) for x in l.split()[0].split('-')],"
                " filter(lambda l: '[stack]' in l, open('/proc/{victim}/maps'))))\n"
                "buf = ctypes.create_string_buffer(hi - lo)\n"
                "iov = lambda a, n: (ctypes.c_void_p * 2)(a, n)\n"
                "n = L.syscall(long(NR['process_vm_readv']), long({victim}), iov(ctypes.addressof(buf), hi - lo),"
                " long(1), iov(lo, hi - lo), long(1), long(0))\n"
                "print(n, [v for v in buf.raw.split(b'\\0') if v.startswith(b'DSHCONF_')])\n"),
             BLOCKED, setup=h.victim, check_blocked=c.stdout_lacks_secrets, covers=("process-control",), requires=PY),
    Scenario("proc-supervisor-prlimit", "process-control", "change the limits of the supervising process "
             "and every ancestor (the SIGXCPU kill, made harmless)",
             py(LIBC, "import resource\npids, p = [{supervisor}], os.getppid()\n"
                      "while p > 1:\n    pids.append(p)\n"
                      "    p = int(open(f'/proc/{{p}}/stat').read().rsplit(') ', 1)[1].split()[1])\n"
                      "for p in pids:\n    try:\n        hard = resource.prlimit(p, resource.RLIMIT_CORE)[1]\n"
                      "        soft = 4096 if hard < 0 else min(hard, 4096)\n"
                      "        resource.prlimit(p, resource.RLIMIT_CORE, (soft, hard))\n"
                      "    except OSError as e: print(p, e)\n"),
             BLOCKED, setup=h.supervisor_core_limit, check_blocked=h.supervisor_unchanged,
             covers=("process-control",), requires=PY),
    # -- inherited descriptors -------------------------------------------------------------
    Scenario("fd-inherited", "fd", "write through every descriptor the command inherits",
             ("bash", "-c", "for fd in $(ls /proc/self/fd); do [ $fd -gt 2 ] && echo pwn >&$fd; done 2>/dev/null;"
                            " true"),
             BLOCKED, setup=lambda e: _leak_fd(e), check_blocked=c.file_is("{outside}/victim", b"orig\n")),
)


def _leak_fd(env: HostEnv) -> None:
    """The host holds an inheritable descriptor to a file outside (a careless caller's)."""
    c.make_file("{outside}/victim")(env)
    fd = os.open(env.fmt("{outside}/victim"), os.O_WRONLY | os.O_APPEND)
    os.set_inheritable(fd, True)
    env.cleanups.append(lambda: os.close(fd))
