"""What a sandbox protects, named once: runners, enforcement facts and the
conformance catalog all speak of the same ``Capability`` values.

A runner declares, for each degradation name a profile may accept, the
capabilities that degradation weakens (``Runner.DEGRADATIONS``); the
conformance catalog marks each scenario with the capabilities it tests
(``Scenario.covers``).  Matching the two is a set intersection, not a string
convention.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capability:
    """One property a sandbox enforces: ``name`` is stable, ``protects`` says what for."""

    name: str
    protects: str

    def __str__(self) -> str:
        return self.name


PROTECTED_PATHS = Capability("protected-paths", ".git, .dsh and other protected names stay read-only")
HIDDEN_PATHS = Capability("hidden-paths", "hidden paths are unreadable")
HIDDEN_METADATA = Capability("hidden-metadata", "names and stat of hidden paths stay invisible")
METADATA = Capability("metadata", "chmod, utime and xattrs outside the writable roots are refused")
TRUNCATE = Capability("truncate", "files outside the writable roots cannot be truncated")
NETWORK = Capability("network", "no network when the profile turns it off")
NETWORK_BY_NAME = Capability("network-by-name", "with an allowlist, the host's proxy is all the command can reach")
SOCKET_FAMILIES = Capability("socket-families", "netlink, AF_VSOCK and other kernel sockets stay closed")
UNIX_SOCKETS = Capability("unix-sockets", "host daemons' unix sockets are out of reach")
NO_SCOPES = Capability("no-scopes", "abstract unix sockets and signals are scoped to the sandbox")
SIGNAL_SCOPE = Capability("signal-scope", "processes outside the sandbox cannot be signalled")
PROCESS_ESCAPE = Capability("process-escape", "nothing the command starts outlives it")
SYSCALL_FILTER = Capability("syscall-filter", "keyrings, io_uring and similar kernel surfaces are filtered")
IO_URING = Capability("io-uring", "io_uring cannot bypass the filesystem rules")
KEYRING = Capability("keyring", "the host's kernel keyrings are out of reach")
LIMITS_PROCESSES = Capability("limits-processes", "the process limit holds")
LIMITS_MEMORY = Capability("limits-memory", "the memory limit holds for the whole sandbox")
LIMITS_FILE_SIZE = Capability("limits-file-size", "the file size limit holds")
LIMITS_WALL_TIME = Capability("limits-wall-time", "the wall time limit holds")
SANDBOX_BOUNDARY = Capability("sandbox-boundary", "the command runs inside a verified isolation boundary")
IPC = Capability("ipc", "the host's SysV IPC, POSIX queues and shared memory are out of reach")
PROCESS_CONTROL = Capability("process-control", "processes outside the sandbox cannot be traced or inspected")
PROCESS_LIST = Capability("process-list", "processes outside the sandbox, and their command lines, stay invisible")
TERMINAL = Capability("terminal", "the caller's terminal cannot be driven (TIOCSTI, job control)")
# Legitimate work a runner may refuse (``Runner.limitations``) or not report
# exactly (``Runner.reporting_gaps``): the other side of the same vocabulary.
LOCAL_IPC = Capability("local-ipc", "the command's own local IPC works")
LOOPBACK = Capability("loopback", "the command's own loopback servers work")
POSIX_SHM = Capability("posix-shm", "the command's own POSIX shared memory works")
ADDRESS_SPACE = Capability("address-space", "runtimes that reserve large address ranges (Node/V8, Go, the JVM) start")
SIGNAL_STATUS = Capability("signal-status", "a command killed by a signal is reported as such")
TMP_PATH = Capability("tmp-path", "the path /tmp itself is writable in workspace-write (not only $TMPDIR)")
FILE_STATUS = Capability("file-status", "ls and stat of a readable path work (statx with every flag glibc passes)")

LIMITS = (LIMITS_PROCESSES, LIMITS_MEMORY, LIMITS_FILE_SIZE, LIMITS_WALL_TIME)

#: Every capability by name.
VOCABULARY: dict[str, Capability] = {
    c.name: c for c in list(globals().values()) if isinstance(c, Capability)
}


def by_name(name: str) -> Capability:
    """The capability called ``name``; ``KeyError`` names the known ones."""
    try:
        return VOCABULARY[name]
    except KeyError:
        raise KeyError(f"unknown capability {name!r}; known: {', '.join(sorted(VOCABULARY))}") from None
