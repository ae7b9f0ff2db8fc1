"""Positive workloads: real developer work that a constrained mode must keep working.

A sandbox that blocks a test suite, a build or a local test server is a defect
too.  Each scenario runs a small but real job (a Python project's tests in a
venv created inside the workspace, ``make`` of a C project, multiprocessing, a
loopback server, git) and says something in both modes: what needs writes is
"blocked" in read-only (judged by no host effect, and the part of the job that
only reads must still work), "ok" in workspace-write (judged by the job's own
output and by what it left in the host workspace).

``covers`` names what a runner may be unable to keep working without opening
the host: ``local-ipc`` for all of it (a runner that shares the host's
``/dev/shm`` and network namespace), or one part (``posix-shm``,
``unix-sockets`` the command binds itself, a ``loopback`` server); a runner that
declares one as a limitation gets "not-enforced" with its reason, never a
silent pass.
"""

from __future__ import annotations

from pathlib import Path

from dsh.cli.conformance import checks as c
from dsh.cli.conformance.model import Check, Expect, HostEnv, RunOutput, Scenario, Setup
from dsh.sandbox import capability as cap

OK: dict[str, Expect] = {"read-only": "ok", "workspace-write": "ok"}
WRITE_ONLY_IN_WW: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "ok"}
# Runner capabilities these workloads depend on (a runner may declare them limited).
LOCAL_IPC = cap.LOCAL_IPC.name
POSIX_SHM = cap.POSIX_SHM.name
UNIX_SOCKETS = cap.UNIX_SOCKETS.name
LOOPBACK = cap.LOOPBACK.name
# A memory limit applied as RLIMIT_AS: V8 (and Go, the JVM) reserve more than they use.
ADDRESS_SPACE = cap.ADDRESS_SPACE.name


def _sh(script: str) -> tuple[str, ...]:
    return ("bash", "-c", script)


def _tree(files: dict[str, str]) -> Setup:
    """Writes a small source tree under the scenario's directory."""

    def setup(env: HostEnv) -> None:
        for rel, text in files.items():
            path = env.ws / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    return setup


def _executable(template: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = Path(env.fmt(template))
        if not path.is_file():
            return f"{path} is not on the host"
        return None if path.stat().st_mode & 0o111 else f"{path} is not executable"

    return check


# -- a Python project with a unittest suite -------------------------------------
PY_PROJECT = {
    "proj/calc/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n",
    "proj/tests/__init__.py": "",
    "proj/tests/test_calc.py": (
        "import sys\nimport unittest\n\nfrom calc import add, mean\n\n\n"
        "class CalcTest(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_mean(self):\n        self.assertEqual(mean([1, 2, 3]), 2)\n\n"
        "    def test_interpreter(self):\n        self.assertGreaterEqual(sys.version_info, (3, 8))\n"
    ),
}
# The venv is made inside the workspace, as a developer would; without
# ensurepip (a distribution's python3 without its venv package) a venv without
# pip is still a venv.  If no venv can be made (read-only), the suite still runs
# on the system interpreter without writing bytecode.
PY_TESTS = (
    "cd {ws}/proj && "
    "if python3 -m venv .venv || python3 -m venv --without-pip .venv; then py=.venv/bin/python; "
    "else py='python3 -B'; fi; "
    "$py -c 'import sys; print(\"in-venv\" if sys.prefix != sys.base_prefix else \"system-python\")' && "
    "$py -m unittest discover -s tests -t . 2>&1 && echo tests-passed"
)

# -- a C project built by make ------------------------------------------------------
C_PROJECT = {
    "cproj/greet.h": "const char *greeting(void);\n",
    "cproj/greet.c": '#include "greet.h"\nconst char *greeting(void) { return "hello from make"; }\n',
    "cproj/main.c": '#include <stdio.h>\n#include "greet.h"\nint main(void) { puts(greeting()); return 0; }\n',
    "cproj/Makefile": (
        "CC ?= cc\nCFLAGS ?= -O1 -Wall -Werror\n\n"
        "hello: main.o greet.o\n\t$(CC) -o $@ main.o greet.o\n\n"
        "%.o: %.c greet.h\n\t$(CC) $(CFLAGS) -c $<\n\n"
        "clean:\n\trm -f hello *.o\n"
    ),
}
# The toolchain check writes nothing (read-only keeps it); the build writes objects
# and the binary into the workspace and runs it.
C_BUILD = (
    "cd {ws}/cproj && cc -Wall -Werror -fsyntax-only main.c greet.c && echo compiler-ran && "
    "make -s && ./hello"
)

# -- multiprocessing ---------------------------------------------------------------------
MP_POOL_LOCK = (
    "import multiprocessing as mp\n"
    "def square(x):\n    return x * x\n"
    "ctx = mp.get_context('fork')\n"
    "lock = ctx.Lock()\n"
    "total = ctx.Value('i', 0)\n"
    "def add(n):\n    with lock:\n        total.value += n\n"
    "with ctx.Pool(2) as pool:\n    squares = pool.map(square, range(10))\n"
    "workers = [ctx.Process(target=add, args=(i,)) for i in range(4)]\n"
    "for w in workers: w.start()\n"
    "for w in workers: w.join()\n"
    "print('pool', sum(squares), 'lock', total.value)\n"
)
# A Manager serves its proxies on a unix socket in a fresh temporary directory:
# TMPDIR names it so the host can tell whether anything was left behind.
MP_MANAGER = (
    "import multiprocessing as mp\n"
    "def fill(d, k):\n    d[k] = k * k\n"
    "ctx = mp.get_context('fork')\n"
    "with ctx.Manager() as m:\n"
    "    d = m.dict()\n"
    "    ps = [ctx.Process(target=fill, args=(d, k)) for k in range(3)]\n"
    "    for p in ps: p.start()\n"
    "    for p in ps: p.join()\n"
    "    print('manager', sorted(d.items()))\n"
)

# -- a test server on loopback, and its client, in one command -----------------------------
LOOPBACK_SERVER = (
    "import http.client, http.server, socket, threading\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = b'served ' + self.path.encode()\n"
    "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers(); self.wfile.write(body)\n"
    "    def log_message(self, *a): pass\n"
    "srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
    "threading.Thread(target=srv.serve_forever, daemon=True).start()\n"
    "conn = http.client.HTTPConnection('127.0.0.1', srv.server_address[1], timeout=10)\n"
    "conn.request('GET', '/ping'); r = conn.getresponse()\n"
    "print(r.status, r.read().decode())\n"
    "srv.shutdown()\n"
)

# -- git ------------------------------------------------------------------------------------------
GIT_ID = "-c user.name=dsh -c user.email=dsh@example.invalid -c init.defaultBranch=main"
GIT_READ = (
    "cd {ws}/repo && git log --oneline | wc -l && git diff --stat && git status --porcelain && "
    "git show --stat HEAD~1 >/dev/null && git blame -s lib.txt | wc -l && echo git-read-ok"
)
GIT_INIT = (
    "mkdir {ws}/fresh && cd {ws}/fresh && git init -q && echo one > f && git add f && "
    f"git {GIT_ID} commit -qm first && git log --oneline | wc -l && echo git-commit-ok"
)


def _git_history(env: HostEnv) -> None:
    """A repo with two commits and a change in the working tree."""
    import subprocess

    repo = env.ws / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(repo), *GIT_ID.split()]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "lib.txt").write_text("alpha\nbeta\n")
    subprocess.run([*git, "add", "lib.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (repo / "lib.txt").write_text("alpha\nbeta\ngamma\n")
    subprocess.run([*git, "commit", "-qam", "second"], check=True)
    (repo / "lib.txt").write_text("alpha\nBETA\ngamma\n")


# -- tools that write under $HOME ---------------------------------------------------------------
# nyc's spawn-wrap writes and runs shims in ~/.node-spawn-wrap-*; npm itself
# keeps its logs and cache in ~/.npm.  Read-only: the home is not writable, the
# suite fails.
NODE_PROJECT = {
    "nodeproj/package.json": '{"name": "dshnode", "version": "1.0.0", "private": true, '
                             '"scripts": {"test": "node test.js"}}\n',
    "nodeproj/test.js": (
        "const fs = require('fs'), os = require('os'), path = require('path'), cp = require('child_process');\n"
        "const dir = fs.mkdtempSync(path.join(os.homedir(), '.node-spawn-wrap-'));\n"
        "const shim = path.join(dir, 'node');\n"
        "fs.writeFileSync(shim, '#!/bin/sh\\necho shim-ran\\n', {mode: 0o755});\n"
        "process.stdout.write(cp.execFileSync(shim).toString());\n"
        "fs.rmSync(dir, {recursive: true});\n"
        "console.log('node-tests-passed');\n"
    ),
}
NODE_TESTS = "cd {ws}/nodeproj && node -e 'process.exit(0)' && echo node-ran && npm test --silent 2>&1"


def _wheel(env: HostEnv) -> None:
    """A pure-Python wheel made by hand: pip installs it without an index or a build backend."""
    import base64
    import hashlib
    import zipfile

    files = {
        "dshdemo/__init__.py": b"VALUE = 42\n",
        "dshdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: dshdemo\nVersion: 1.0\n",
        "dshdemo-1.0.dist-info/WHEEL": (b"Wheel-Version: 1.0\nGenerator: dsh\nRoot-Is-Purelib: true\n"
                                        b"Tag: py3-none-any\n"),
    }

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = [f"{name},sha256={digest(data)},{len(data)}" for name, data in files.items()]
    files["dshdemo-1.0.dist-info/RECORD"] = ("\n".join([*record, "dshdemo-1.0.dist-info/RECORD,,"]) + "\n").encode()
    project = env.ws / "pipproj"
    project.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(project / "dshdemo-1.0-py3-none-any.whl", "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)


# pip keeps its cache in $XDG_CACHE_HOME/pip (~/.cache/pip) and disables it,
# with a warning, when that is not writable.
PIP_INSTALL = (
    "cd {ws}/pipproj && python3 -m venv .venv && d=$(.venv/bin/python -m pip cache dir) && "
    'case "$d" in "$HOME"/*) mkdir -p "$d" && touch "$d/.dsh-probe" && echo cache-in-home ;; esac && '
    ".venv/bin/python -m pip install --no-index --disable-pip-version-check -q "
    "./dshdemo-1.0-py3-none-any.whl 2>&1 && .venv/bin/python -c 'import dshdemo; print(\"imported\", dshdemo.VALUE)'"
)


def _lacks(text: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        both = out.stdout + out.stderr
        return f"output says {text!r}" if text.encode() in both else None

    return check


def _remove_tree(template: str) -> Check:
    """Not a check: removes a directory an allowed run left in the host's /tmp."""

    def check(env: HostEnv, out: RunOutput) -> str | None:
        import shutil

        shutil.rmtree(env.fmt(template), ignore_errors=True)
        return None

    return check


WORKLOAD_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("work-python-venv-tests", "workload",
             "a Python project's unittest suite in a venv made inside the workspace "
             "(read-only: no venv, the suite still runs)",
             _sh(PY_TESTS), WRITE_ONLY_IN_WW, setup=_tree(PY_PROJECT), requires=("python3",), timeout_ms=90_000,
             check_ok=c.all_of(c.exit_zero, c.stdout_has("in-venv"), c.stdout_has("Ran 3 tests"),
                               c.stdout_has("tests-passed"), c.present("{ws}/proj/.venv/pyvenv.cfg")),
             check_blocked=c.all_of(c.stdout_has("Ran 3 tests"), c.stdout_has("tests-passed"),
                                    c.absent("{ws}/proj/.venv"))),
    Scenario("work-make-c", "workload",
             "make builds a small C project and the binary runs (read-only: the compiler runs, nothing is written)",
             _sh(C_BUILD), WRITE_ONLY_IN_WW, setup=_tree(C_PROJECT), requires=("cc", "make"), timeout_ms=60_000,
             check_ok=c.all_of(c.exit_zero, c.stdout_has("compiler-ran"), c.stdout_has("hello from make"),
                               _executable("{ws}/cproj/hello")),
             check_blocked=c.all_of(c.stdout_has("compiler-ran"), c.absent("{ws}/cproj/hello"),
                                    c.absent("{ws}/cproj/main.o"))),
    # $TMPDIR, as the tools that write and run temporary programs use it (the literal
    # /tmp is pos-tmp-write's); it names the session's private directory.
    Scenario("work-tmp-exec", "workload", "a program written to $TMPDIR can be executed (workspace-write)",
             _sh("d=${{TMPDIR:-/tmp}}/dshconf-{nonce} && mkdir $d && "
                 "printf '#!/bin/sh\\necho ran-from-tmp\\n' > $d/t && chmod +x $d/t && $d/t"), WRITE_ONLY_IN_WW,
             check_ok=c.all_of(c.exit_zero, c.stdout_has("ran-from-tmp"), _remove_tree("/tmp/dshconf-{nonce}")),
             check_blocked=c.absent("/tmp/dshconf-{nonce}")),
    Scenario("work-mp-pool-lock", "workload", "multiprocessing Pool (fork), Lock and shared Value work",
             ("python3", "-c", MP_POOL_LOCK), OK, requires=("python3",), covers=(LOCAL_IPC, POSIX_SHM),
             timeout_ms=60_000,
             check_ok=c.all_of(c.exit_zero, c.stdout_is(b"pool 285 lock 6\n"))),
    Scenario("work-mp-manager", "workload",
             "a multiprocessing Manager serves a shared dict (its socket needs a writable temp dir)",
             ("bash", "-c", "d=${{TMPDIR:-/tmp}}/dshconf-{nonce} && mkdir $d && TMPDIR=$d exec python3 -c \"$1\"",
              "bash", MP_MANAGER),
             WRITE_ONLY_IN_WW, requires=("python3",), covers=(LOCAL_IPC, POSIX_SHM, UNIX_SOCKETS),
             timeout_ms=60_000,
             check_ok=c.all_of(c.exit_zero, c.stdout_is(b"manager [(0, 0), (1, 1), (2, 4)]\n"),
                               _remove_tree("/tmp/dshconf-{nonce}")),
             check_blocked=c.absent("/tmp/dshconf-{nonce}")),
    Scenario("work-loopback-server", "workload", "an HTTP test server on 127.0.0.1 and its client in one command",
             ("python3", "-c", LOOPBACK_SERVER), OK, requires=("python3",), covers=(LOCAL_IPC, LOOPBACK),
             check_ok=c.all_of(c.exit_zero, c.stdout_is(b"200 served /ping\n"))),
    Scenario("work-git-read", "workload", "git log, diff, status, show and blame on a checkout",
             _sh(GIT_READ), OK, setup=_git_history, requires=("git",),
             check_ok=c.all_of(c.exit_zero, c.stdout_has("git-read-ok"), c.stdout_has(" M lib.txt"),
                               c.stdout_has("1 file changed"))),
    Scenario("work-node-home-cache", "workload",
             "npm test whose suite writes and runs a shim in ~/.node-spawn-wrap-* (nyc's spawn-wrap)",
             _sh(NODE_TESTS), WRITE_ONLY_IN_WW, setup=_tree(NODE_PROJECT), requires=("node", "npm"),
             covers=(ADDRESS_SPACE,), timeout_ms=90_000,
             check_ok=c.all_of(c.exit_zero, c.stdout_has("node-ran"), c.stdout_has("shim-ran"),
                               c.stdout_has("node-tests-passed")),
             # Not "node-ran": under an address-space limit node cannot start at all.
             check_blocked=c.all_of(c.exit_nonzero, _lacks("node-tests-passed"))),
    Scenario("work-pip-home-cache", "workload",
             "a venv in the workspace and pip install of a local wheel with pip's cache in $HOME "
             "(read-only: no venv)",
             _sh(PIP_INSTALL), WRITE_ONLY_IN_WW, setup=_wheel, requires=("python3",), timeout_ms=120_000,
             check_ok=c.all_of(c.exit_zero, c.stdout_has("cache-in-home"), c.stdout_has("imported 42"),
                               _lacks("cache has been disabled"), c.present("{ws}/pipproj/.venv/pyvenv.cfg")),
             check_blocked=c.absent("{ws}/pipproj/.venv")),
    Scenario("work-git-init-commit", "workload", "git init and a commit in a new directory inside the workspace",
             _sh(GIT_INIT), WRITE_ONLY_IN_WW, requires=("git",),
             # The commit succeeding proves .git was writable where the command ran; the host
             # copy is judged by the work file (a remote runner keeps the repository remote).
             check_ok=c.all_of(c.exit_zero, c.stdout_has("git-commit-ok"), c.present("{ws}/fresh/f")),
             check_blocked=c.absent("{ws}/fresh")),
)
