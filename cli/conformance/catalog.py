"""The conformance catalog: every scenario a runner must hold, as data.

Every "blocked" expectation is judged by its effect on the host, checked after
the command: a remote runner (E2B) may let a read-only command write its own
copy of the workspace, as long as nothing of it reaches the host.

Families: positive capabilities, filesystem attacks, protected paths, network,
process escapes, resource limits, environment leaks, exact argv, output contract.
Expectations are per mode (read-only, workspace-write); ``covers`` names the
capability a runner may declare partial (then the scenario is reported
"not-enforced" with the runner's reason, never as a pass).
"""

from __future__ import annotations

from dsh.cli.conformance import checks as c
from dsh.cli.conformance.catalog_workloads import WORKLOAD_SCENARIOS
from dsh.cli.conformance.model import Expect, HostEnv, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
OK: dict[str, Expect] = {"read-only": "ok", "workspace-write": "ok"}
WRITE_ONLY_IN_WW: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "ok"}


def sh(script: str) -> tuple[str, ...]:
    return ("bash", "-c", script)


def py(code: str) -> tuple[str, ...]:
    return ("python3", "-c", code)


# Marks a process so the host can find it: `exec -a dshconf-<nonce> sleep N`.
MARK = "exec -a dshconf-{nonce} sleep 300"

SCENARIOS: tuple[Scenario, ...] = (
    # -- positive capabilities every constrained mode keeps -------------------
    Scenario("pos-true", "positive", "a trivial command runs", ("true",), OK, check_ok=c.exit_zero),
    Scenario("pos-exit-code", "positive", "the exit code comes back exactly", sh("exit 7"), OK,
             check_ok=lambda e, o: None if o.exit_code == 7 else f"exit {o.exit_code} != 7"),
    Scenario("pos-dev-null", "positive", "/dev/null stays writable", sh("echo x > /dev/null && echo done"),
             OK, check_ok=c.all_of(c.exit_zero, c.stdout_has("done"))),
    Scenario("pos-read-system", "positive", "system files stay readable",
             sh("head -c 4 /etc/passwd >/dev/null && ls /usr/bin >/dev/null"), OK, check_ok=c.exit_zero,
             covers=("file-status",)),
    Scenario("pos-pipeline", "positive", "pipes and coreutils work",
             sh("printf 'b\\na\\n' | sort | tr -d '\\n'"), OK, check_ok=c.stdout_is(b"ab")),
    Scenario("pos-read-workspace", "positive", "workspace files are readable",
             sh("cat {ws}/input.txt"), OK, setup=c.make_file("{ws}/input.txt", b"hello\n"),
             check_ok=c.stdout_is(b"hello\n")),
    Scenario("pos-workspace-write", "positive", "the workspace is writable in workspace-write only",
             sh("echo hi > {ws}/out.txt"), WRITE_ONLY_IN_WW,
             check_ok=c.all_of(c.exit_zero, c.file_is("{ws}/out.txt", b"hi\n")),
             check_blocked=c.absent("{ws}/out.txt")),
    Scenario("pos-workspace-mkdir-rm", "positive", "create, rename and delete inside the workspace",
             sh("mkdir {ws}/d && echo x > {ws}/d/f && mv {ws}/d/f {ws}/d/g && rm {ws}/d/g && rmdir {ws}/d"
                " && touch {ws}/kept"), WRITE_ONLY_IN_WW,
             check_ok=c.all_of(c.exit_zero, c.absent("{ws}/d"), c.file_is("{ws}/kept", b"")),
             check_blocked=c.all_of(c.absent("{ws}/d"), c.absent("{ws}/kept"))),
    Scenario("pos-workspace-build", "positive", "a build-like job (generate, compile, link) works",
             sh("cd {ws} && for i in 1 2 3; do echo \"part $i\" > p$i.src; done && cat p*.src > app.o"
                " && sort -r app.o > app && chmod +x app && test -s app && echo built"),
             WRITE_ONLY_IN_WW, check_ok=c.all_of(c.exit_zero, c.stdout_has("built")),
             check_blocked=c.absent("{ws}/app")),
    # The literal /tmp: landlock cannot show the session's private directory there (``tmp-path``).
    Scenario("pos-tmp-write", "positive", "/tmp is writable in workspace-write, and the host's is not in read-only",
             sh("echo x > /tmp/dshconf-{nonce} && cat /tmp/dshconf-{nonce}"), WRITE_ONLY_IN_WW, covers=("tmp-path",),
             check_ok=c.all_of(c.exit_zero, c.stdout_has("x"), c.remove("/tmp/dshconf-{nonce}")),
             # Host effect: a remote or container runner's own /tmp is not the host's.
             check_blocked=c.absent("/tmp/dshconf-{nonce}")),
    Scenario("pos-git-status", "positive", "git status works on a read-only checkout",
             sh("cd {ws}/repo && git status --porcelain && git log --oneline | wc -l"), OK,
             setup=lambda e: _git_repo(e), check_ok=c.all_of(c.exit_zero, c.stdout_has("1")),
             requires=("git",)),
    Scenario("pos-socketpair", "positive", "AF_UNIX socketpairs keep working with network off",
             py("import socket; a, b = socket.socketpair(); a.send(b'ok'); print(b.recv(2).decode())"),
             OK, check_ok=c.stdout_is(b"ok\n"), requires=("python3",)),
    Scenario("pos-stderr-separate", "output", "stdout and stderr stay separate and exact",
             sh("echo out; echo err >&2"), OK,
             check_ok=lambda e, o: None if (o.stdout, o.stderr) == (b"out\n", b"err\n")
             else f"stdout={o.stdout!r} stderr={o.stderr!r}"),
    # -- filesystem attacks --------------------------------------------------
    Scenario("fs-write-outside", "filesystem", "write a file outside every root",
             sh("echo pwn > {outside}/plain"), BLOCKED, check_blocked=c.absent("{outside}/plain")),
    Scenario("fs-write-etc", "filesystem", "write into /etc",
             sh("echo pwn > /etc/dshconf-{nonce}"), BLOCKED, check_blocked=c.absent("/etc/dshconf-{nonce}")),
    Scenario("fs-write-home", "filesystem", "write into the invoking user's home",
             sh("echo pwn > ${{HOME:-/root}}/dshconf-{nonce}"), BLOCKED,
             check_blocked=lambda e, o: c.absent(f"{_home()}/dshconf-{{nonce}}")(e, o)),
    Scenario("fs-dotdot", "filesystem", "escape the workspace with ..",
             sh("cd {ws} && echo pwn > ../../outside/dotdot"), BLOCKED,
             check_blocked=c.absent("{outside}/dotdot")),
    Scenario("fs-proc-self-root", "filesystem", "escape through /proc/self/root",
             sh("echo pwn > /proc/self/root{outside}/procroot"), BLOCKED,
             check_blocked=c.absent("{outside}/procroot")),
    Scenario("fs-proc-self-cwd", "filesystem", "escape through /proc/self/cwd",
             sh("cd {outside} && echo pwn > /proc/self/cwd/proccwd"), BLOCKED,
             check_blocked=c.absent("{outside}/proccwd")),
    Scenario("fs-symlink-new", "filesystem", "create a symlink to outside and write through it",
             sh("ln -s {outside} {ws}/out-link; echo pwn > {ws}/out-link/viasym"), BLOCKED,
             check_blocked=c.absent("{outside}/viasym")),
    Scenario("fs-symlink-existing", "filesystem", "write through a pre-existing symlink to outside",
             sh("echo pwn > {ws}/lnk/viasym2"), BLOCKED, setup=c.make_symlink("{ws}/lnk", "{outside}"),
             check_blocked=c.absent("{outside}/viasym2")),
    Scenario("fs-hardlink-outside", "filesystem", "hardlink an outside file in, then write it",
             sh("ln {outside}/victim {ws}/hl; echo pwn > {ws}/hl"), BLOCKED,
             setup=c.make_file("{outside}/victim"), check_blocked=c.file_is("{outside}/victim", b"orig\n")),
    Scenario("fs-rename-in", "filesystem", "move an outside file into the workspace",
             sh("mv {outside}/victim {ws}/stolen"), BLOCKED, setup=c.make_file("{outside}/victim"),
             check_blocked=c.file_is("{outside}/victim", b"orig\n")),
    Scenario("fs-delete-outside", "filesystem", "delete an outside file",
             sh("rm -f {outside}/victim"), BLOCKED, setup=c.make_file("{outside}/victim"),
             check_blocked=c.file_is("{outside}/victim", b"orig\n")),
    Scenario("fs-truncate-outside", "filesystem", "truncate an outside file",
             sh("truncate -s 0 {outside}/victim || : > {outside}/victim"), BLOCKED,
             setup=c.make_file("{outside}/victim"), check_blocked=c.file_is("{outside}/victim", b"orig\n")),
    Scenario("fs-chmod-outside", "filesystem", "change the mode of an outside file",
             sh("chmod 777 {outside}/victim"), BLOCKED, setup=c.make_file("{outside}/victim"),
             check_blocked=c.mode_is("{outside}/victim", 0o644), covers=("metadata",)),
    Scenario("fs-mkfifo-outside", "filesystem", "create a fifo outside",
             sh("mkfifo {outside}/fifo"), BLOCKED, check_blocked=c.absent("{outside}/fifo")),
    Scenario("fs-mkdir-outside", "filesystem", "create a directory outside",
             sh("mkdir {outside}/newdir"), BLOCKED, check_blocked=c.absent("{outside}/newdir")),
    Scenario("fs-dev-shm", "filesystem", "write to the host's /dev/shm",
             sh("echo pwn > /dev/shm/dshconf-{nonce}"), BLOCKED, check_blocked=c.absent("/dev/shm/dshconf-{nonce}")),
    Scenario("fs-workspace-ro", "filesystem", "overwrite a workspace file in read-only mode",
             sh("echo pwn > {ws}/keep.txt"), WRITE_ONLY_IN_WW, setup=c.make_file("{ws}/keep.txt"),
             check_ok=c.file_is("{ws}/keep.txt", b"pwn\n"),
             check_blocked=c.file_is("{ws}/keep.txt", b"orig\n")),
    Scenario("fs-mount-escape", "filesystem", "mount over an outside path (directly and in a new namespace)",
             sh("mount -t tmpfs none {outside} 2>/dev/null; unshare -rm sh -c 'mount -t tmpfs none {outside}"
                " && echo pwn > {outside}/mnt' 2>/dev/null; echo pwn > {outside}/mnt2"), BLOCKED,
             check_blocked=c.all_of(c.absent("{outside}/mnt"), c.absent("{outside}/mnt2"))),
    Scenario("fs-hidden-read", "filesystem", "read a path the profile hides",
             sh("cat {root}/hidden/secret.txt"), BLOCKED,
             check_blocked=lambda e, o: None if b"TOPSECRET" not in o.stdout else "hidden file was read",
             covers=("hidden-paths",)),
    # -- protected paths inside the writable workspace ------------------------
    Scenario("prot-git-direct", "protected", "write .git/config directly", sh("echo pwn >> {root}/.git/config"),
             BLOCKED, setup=c.git_dir, covers=("protected-paths",),
             check_blocked=c.file_is("{root}/.git/config", b"[core]\n\trepositoryformatversion = 0\n")),
    Scenario("prot-git-hook", "protected", "plant a git hook", sh("mkdir -p {root}/.git/hooks && "
             "printf '#!/bin/sh\\necho pwn\\n' > {root}/.git/hooks/pre-commit"), BLOCKED, setup=c.git_dir,
             covers=("protected-paths",), check_blocked=c.absent("{root}/.git/hooks/pre-commit")),
    Scenario("prot-git-symlink", "protected", "write .git through a symlink",
             sh("ln -s {root}/.git {ws}/g && echo pwn >> {ws}/g/config"), BLOCKED, setup=c.git_dir,
             covers=("protected-paths",),
             check_blocked=c.file_is("{root}/.git/config", b"[core]\n\trepositoryformatversion = 0\n")),
    Scenario("prot-git-rename-parent", "protected", "rename .git away and write the renamed copy",
             sh("mv {root}/.git {root}/g2 && echo pwn >> {root}/g2/config"), BLOCKED, setup=c.git_dir,
             covers=("protected-paths",),
             # The protected path must be intact; a plain copy under another name
             # (a remote runner may sync g2/ back) is no longer a git dir.
             check_blocked=c.file_is("{root}/.git/config", b"[core]\n\trepositoryformatversion = 0\n")),
    Scenario("prot-git-hardlink", "protected", "hardlink .git/config and write the link",
             sh("ln {root}/.git/config {ws}/cfg && echo pwn >> {ws}/cfg"), BLOCKED, setup=c.git_dir,
             covers=("protected-paths",),
             check_blocked=c.file_is("{root}/.git/config", b"[core]\n\trepositoryformatversion = 0\n")),
    # git init must work; the config it (or the command) writes is reported.
    Scenario("prot-git-create", "protected", "create .git when it does not exist: allowed, and reported",
             sh("mkdir {root}/.git && echo pwn > {root}/.git/config"), WRITE_ONLY_IN_WW, setup=c.no_git_dir,
             covers=("protected-paths",), check_blocked=c.absent_or_empty("{root}/.git"),
             check_ok=c.all_of(c.exit_zero, c.absent_or_reported("{root}/.git/config"))),
    Scenario("prot-dsh-create", "protected", "create .dsh/ in the workspace",
             sh("mkdir -p {root}/.dsh && echo pwn > {root}/.dsh/config"), BLOCKED,
             covers=("protected-paths",), check_blocked=c.absent_or_empty("{root}/.dsh")),
    Scenario("prot-git-delete", "protected", "delete .git", sh("rm -rf {root}/.git"), BLOCKED, setup=c.git_dir,
             covers=("protected-paths",),
             check_blocked=c.file_is("{root}/.git/config", b"[core]\n\trepositoryformatversion = 0\n")),
    # -- network (off in both constrained modes) --------------------------------
    Scenario("net-tcp", "network", "TCP to a listener on the host loopback",
             sh("exec 3<>/dev/tcp/127.0.0.1/{tcp} && echo hi >&3"), BLOCKED,
             check_blocked=c.no_hits("tcp"), covers=("network",)),
    Scenario("net-tcp6", "network", "TCP over IPv6 to a listener on ::1",
             sh("exec 3<>/dev/tcp/::1/{tcp6} && echo hi >&3"), BLOCKED,
             check_blocked=c.no_hits("tcp6"), covers=("network",)),
    Scenario("net-udp", "network", "UDP datagrams to a host listener",
             sh("for i in 1 2 3; do echo hi > /dev/udp/127.0.0.1/{udp}; done"), BLOCKED,
             check_blocked=c.no_hits("udp"), covers=("network",)),
    Scenario("net-dns", "network", "a DNS query to a resolver on the host loopback",
             py("import socket,struct\n"
                "q=struct.pack('>HHHHHH',1,256,1,0,0,0)+b'\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01'\n"
                "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.sendto(q,('127.0.0.1',{dns}))"),
             BLOCKED, check_blocked=c.no_hits("dns"), covers=("network",), requires=("python3",)),
    Scenario("net-abstract-unix", "network", "connect to an abstract unix socket outside",
             py("import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{abstract}'); s.send(b'hi')"),
             BLOCKED, check_blocked=c.no_hits("abstract"), covers=("network",), requires=("python3",)),
    Scenario("net-unix-path", "network", "connect to a host unix socket by path (like docker.sock)",
             py("import socket; s=socket.socket(socket.AF_UNIX); s.connect('{unix_path}'); s.send(b'hi')"),
             BLOCKED, check_blocked=c.no_hits("unix"), covers=("network",), requires=("python3",)),
    Scenario("net-netlink-link", "network", "add a network link on the host through netlink",
             sh("ip link add dshc{nonce_short} type dummy"), BLOCKED,
             check_blocked=lambda e, o: c.absent(f"/sys/class/net/dshc{e.nonce[:8]}")(e, o),
             requires=("ip",)),
    Scenario("net-raw-socket", "network", "open a raw packet socket",
             py("import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)"), BLOCKED,
             check_blocked=c.exit_nonzero, requires=("python3",)),
    # -- process escapes ------------------------------------------------------
    Scenario("proc-double-fork-timeout", "process", "a double-forked child does not survive the timeout",
             sh("( (" + MARK + ") & ) ; " + MARK), BLOCKED, timeout_ms=1500,
             check_blocked=c.all_of(c.timed_out, c.no_process_left)),
    Scenario("proc-setsid-escape", "process", "a setsid daemon does not outlive the command",
             sh("setsid -f bash -c '" + MARK + "' ; sleep 0.2; echo left"), BLOCKED,
             check_blocked=c.no_process_left, covers=("process-escape",)),
    Scenario("proc-nohup-timeout", "process", "a nohup'd background job does not survive the timeout",
             sh("nohup bash -c '" + MARK + "' >/dev/null 2>&1 & " + MARK), BLOCKED, timeout_ms=1500,
             check_blocked=c.all_of(c.timed_out, c.no_process_left)),
    Scenario("proc-ignore-sigterm", "process", "a command ignoring SIGTERM is still killed at the deadline",
             sh("trap '' TERM; " + MARK), BLOCKED, timeout_ms=1000,
             check_blocked=c.all_of(c.timed_out, c.no_process_left, c.ended_within(15))),
    Scenario("proc-signal-outside", "process", "signal a process outside the sandbox",
             sh("kill -TERM {victim}; kill -KILL {victim}"), BLOCKED, check_blocked=c.victim_alive,
             covers=("signal-scope",)),
    Scenario("proc-environ-outside", "process", "read another process's environment through /proc",
             sh("cat /proc/{victim}/environ | tr '\\0' '\\n'"), BLOCKED, check_blocked=c.stdout_lacks_secrets),
    Scenario("proc-parent-environ", "process", "read the executor's environment through /proc/$PPID",
             sh("cat /proc/$PPID/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; true"), BLOCKED,
             check_blocked=c.stdout_lacks_secrets),
    Scenario("proc-setuid", "process", "a setuid-root binary does not grant root",
             sh("{suid} -u"), BLOCKED,
             check_blocked=lambda e, o: None if o.stdout.strip() != b"0" else "setuid helper ran as root",
             # The uid printed is the sandbox kernel's: on a runner whose kernel is not
             # this host's, 0 can be the caller itself mapped as root in a user namespace.
             judged_inside=True),
    # -- resource limits (the conformance profile sets them) --------------------
    Scenario("lim-processes", "limits", "a fork storm is stopped by the process limit",
             py("import os,time\nn=0\nfor i in range(1500):\n  try: pid=os.fork()\n  except OSError: break\n"
                "  if pid==0:\n    time.sleep(20); os._exit(0)\n  n+=1\nprint(n)"), BLOCKED, timeout_ms=30_000,
             check_blocked=lambda e, o: None if o.stdout.strip() and int(o.stdout.strip() or 0) < 1500
             else f"{o.stdout.strip().decode() or 'all'} forks succeeded", covers=("limits-processes",),
             requires=("python3",)),
    Scenario("lim-memory", "limits", "a memory hog is stopped by the memory limit",
             py("b = bytearray(1536 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('allocated')"),
             BLOCKED, timeout_ms=30_000,
             check_blocked=lambda e, o: None if b"allocated" not in o.stdout else "1.5 GiB were allocated",
             covers=("limits-memory",), requires=("python3",)),
    Scenario("lim-file-size", "limits", "a file cannot grow past the file-size limit",
             sh("head -c 40000000 /dev/zero > {ws}/big"), {"read-only": "blocked", "workspace-write": "blocked"},
             check_blocked=lambda e, o: _size_at_most(e.ws / "big", 16 * 1024 * 1024),
             covers=("limits-file-size",)),
    Scenario("lim-wall-time", "limits", "the timeout stops a long command", ("sleep", "60"), BLOCKED,
             timeout_ms=1000, check_blocked=c.all_of(c.timed_out, c.ended_within(15))),
    # -- environment -------------------------------------------------------------
    Scenario("env-credentials", "environment", "credential-shaped variables do not reach the command",
             ("env",), BLOCKED, check_blocked=c.stdout_lacks_secrets),
    Scenario("env-dsh-override", "environment", "a caller cannot override a managed DSH_* fact",
             sh("echo \"$DSH_HOME\""), OK, env={"DSH_HOME": "/evil-override"},
             check_ok=lambda e, o: None if b"/evil-override" not in o.stdout else "DSH_HOME was overridden"),
    Scenario("env-terminal-overrides", "environment", "the model-friendly terminal env is set",
             sh("echo $NO_COLOR $TERM $PAGER $GIT_PAGER"), OK, check_ok=c.stdout_is(b"1 dumb cat cat\n")),
    # -- exact argv ---------------------------------------------------------------
    Scenario("argv-spaces", "argv", "spaces and tabs survive", ("printf", "%s\\0", "a b", "  c  ", "\t"),
             OK, check_ok=c.stdout_is(b"a b\0  c  \0\t\0")),
    Scenario("argv-quotes-dollar", "argv", "quotes, $ and backticks are not interpreted",
             ("printf", "%s\\0", "'\"", "$HOME", "`id`", "$(id)", "*"), OK,
             check_ok=c.stdout_is(b"'\"\0$HOME\0`id`\0$(id)\0*\0")),
    Scenario("argv-newlines-empty", "argv", "newlines and empty strings survive",
             ("printf", "%s\\0", "a\nb", "", "x"), OK, check_ok=c.stdout_is(b"a\nb\0\0x\0")),
    Scenario("argv-non-utf8", "argv", "non-UTF-8 bytes survive", ("printf", "%s\\0", b"\xff\xfe-\x80"), OK,
             check_ok=c.stdout_is(b"\xff\xfe-\x80\0")),
    Scenario("argv-dash", "argv", "arguments that look like options stay arguments",
             ("printf", "%s\\0", "--", "-c", "--help"), OK, check_ok=c.stdout_is(b"--\0-c\0--help\0")),
    # -- output contract -----------------------------------------------------------
    Scenario("out-huge", "output", "huge output is bounded in memory, counted exactly, spilled",
             sh("head -c 20000000 /dev/zero | tr '\\0' a"), OK,
             check_ok=lambda e, o: None if o.stdout_total == 20_000_000 and o.stdout_omitted > 0
             and o.spill_path else f"total={o.stdout_total} omitted={o.stdout_omitted} spill={o.spill_path}"),
    Scenario("out-binary", "output", "binary output arrives byte for byte",
             sh("printf '\\000\\001\\377\\376binary'"), OK, check_ok=c.stdout_is(b"\x00\x01\xff\xfebinary")),
    Scenario("out-utf8-cut", "output", "a cut never splits a UTF-8 code point",
             sh("for i in $(seq 30000); do printf 'é€😀'; done"), OK,
             check_ok=lambda e, o: None if "\ufffd" not in o.stdout_text and o.stdout_omitted > 0
             else "retained text has a broken code point or nothing was cut"),
    Scenario("out-signal", "output", "death by signal is reported as the signal",
             sh("kill -KILL $$"), OK, covers=("signal-status",),
             check_ok=lambda e, o: None if o.signal == "SIGKILL" and o.exit_code is None
             else f"exit={o.exit_code} signal={o.signal}"),
    *WORKLOAD_SCENARIOS,
)


def _home() -> str:
    import os

    return os.path.expanduser("~")


def _size_at_most(path: object, limit: int) -> str | None:
    import os

    try:
        size = os.path.getsize(str(path))
    except OSError:
        return None
    return None if size <= limit else f"{path} grew to {size} bytes (limit {limit})"


def _git_repo(env: HostEnv) -> None:
    import subprocess

    repo = env.ws / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("x\n")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)


# The hostile-host, kernel, policy and other scenario families live in their
# own modules; each adds its tuple here.
from dsh.cli.conformance import (  # noqa: E402
    catalog_gitsurface,
    catalog_host,
    catalog_kernel,
    catalog_network,
    catalog_ownstate,
    catalog_pins,
    catalog_policy,
    catalog_terminal,
    catalog_tmprepo,
)

for _family in (catalog_host, catalog_kernel, catalog_policy, catalog_gitsurface, catalog_tmprepo, catalog_pins,
                catalog_ownstate, catalog_network):
    SCENARIOS += _family.SCENARIOS
# The pty variants of every family's scenarios, then the terminal family's own.
SCENARIOS += catalog_terminal.pty_variants(SCENARIOS)
SCENARIOS += catalog_terminal.SCENARIOS


def by_id() -> dict[str, Scenario]:
    return {s.id: s for s in SCENARIOS}
