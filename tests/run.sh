#!/usr/bin/env bash
# The project's test command (the README's second command; .ci/run calls it).
#
# On a fresh Debian 12 machine, as root or as a user with sudo, it installs
# what the tests need when missing -- bubblewrap, a Docker daemon, the tools to build
# the runner image (mmdebstrap) and what the workload scenarios and hook tests run (gcc, make,
# python3-venv, git, curl) -- installs the project with its test extras, starts the
# Docker daemon, then runs ruff, import-linter, mypy --strict, pytest, the E2B
# SDK floor and the conformance suite.
#
# Every check stage runs even when an earlier one failed; a summary of all
# stages (status and time) ends the output, and the exit status is 1 when any
# failed.  Only a failed setup step (installing, the daemon, the image) stops
# the run early, since nothing after it could run; the summary says so.
# Steps that take minutes print a line with the elapsed time every 30 s.
#
# What CI has must run, not skip: DSH_REQUIRE (runners, and the cgroups the
# limit tests need) turns a missing one into a test failure.  Set DSH_REQUIRE=
# (empty) to allow skips on a machine without them.
#
# Arguments go to pytest and narrow the run to those tests (after the setup
# and the static checks); the E2B floor, the fresh machine and conformance run
# only in a whole run.
#
# DSH_FRESH_MACHINE=1 (set by .ci/run) also proves the README's first command
# in a fresh Debian 12 root filesystem (.ci/fresh-machine.sh, about 7 minutes
# and 1 GB of downloads), side by side with pytest; a user's run leaves it out.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# The suite needs root: it starts a Docker daemon, makes cgroup hierarchies and
# runs the conformance suite as root and as nobody.  A user with sudo types the
# same command: it runs again under sudo, keeping PATH (an activated venv) and
# the DSH_* settings, and whatever it creates in the checkout (a .venv, the
# editable install's links, bytecode) is handed back to that user at the end.
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "tests/run.sh: needs root (Docker daemon, cgroups, conformance as nobody): run it as root, or install sudo" >&2
    exit 2
  fi
  echo "tests/run.sh: needs root (Docker daemon, cgroups, conformance as nobody): running again under sudo"
  keep=("PATH=$PATH")
  [ -n "${VIRTUAL_ENV:-}" ] && keep+=("VIRTUAL_ENV=$VIRTUAL_ENV")
  while IFS= read -r name; do keep+=("$name=${!name}"); done < <(compgen -e | grep '^DSH_' || true)
  exec sudo -- env "${keep[@]}" bash "$root/tests/run.sh" "$@"
fi

# A user's PATH, kept through sudo, lacks the sbin directories that hold
# dockerd and apt's helpers.
for dir in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in *":$dir:"*) ;; *) PATH="$PATH:$dir" ;; esac
done
export PATH

logs="$(mktemp -d /var/tmp/dsh-run-logs.XXXXXX)"
on_exit=('rm -rf "$logs"')
run_on_exit() { local action; for action in "${on_exit[@]}"; do eval "$action" || true; done; }
trap run_on_exit EXIT
# Under sudo, from a checkout the invoking user owns: return what this run
# created there (only files now owned by root; symlinks themselves, not their
# targets; never across a mount).
if [ -n "${SUDO_UID:-}" ] && [ "${SUDO_UID}" != 0 ] && [ "$(stat -c %u "$root")" = "$SUDO_UID" ]; then
  on_exit+=('find "$root" -xdev -user 0 -exec chown -h "$SUDO_UID:$SUDO_GID" {} +')
fi

# -- stages: stage, setup, background/collect, finish (tests/stages.sh) -----
# shellcheck source=tests/stages.sh
. "$root/tests/stages.sh"
# Nothing started in the background outlives the run.
on_exit+=('for pid in "${bg_pid[@]}"; do kill "$pid" 2>/dev/null; done')

# -- setup --------------------------------------------------------------------
need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v runsc >/dev/null 2>&1 || need_apt+=(runsc)
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v busybox >/dev/null 2>&1 || need_apt+=(busybox-static)
command -v setpriv >/dev/null 2>&1 || need_apt+=(util-linux)
command -v git >/dev/null 2>&1 || need_apt+=(git)
# The hook tests run guards that call curl, as a user's hooks do.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# The workload scenarios build C, make a venv and run git under landlock and
# bwrap (host programs); mmdebstrap builds the docker runner's Debian image.
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
apt_install() {
  apt-get update -qq && env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if [ "${#need_apt[@]}" -gt 0 ]; then
  setup "apt-get install ${need_apt[*]}" apt_install "${need_apt[@]}"
fi

# Inside a virtual environment, install there; outside one, make (or reuse)
# `.venv` in the checkout: Debian's own python refuses `pip install` outside a
# venv (PEP 668).  The venv's bin goes first on PATH so that every python3 and
# dsh-sandbox below is the one just installed.
if ! python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  [ -x "$root/.venv/bin/python3" ] || setup "python3 -m venv .venv" python3 -m venv "$root/.venv"
  export VIRTUAL_ENV="$root/.venv"
  export PATH="$VIRTUAL_ENV/bin:$PATH"
fi
install_project() {
  # Strict editable mode: a tree of links that mypy, IDEs and code browsers can
  # follow (the default mode is an import hook they cannot).  A new module needs
  # this install re-run, which this script always does.
  python3 -m pip install -q --disable-pip-version-check -e "$root[all,test]" --config-settings editable_mode=strict || return
  # An editable install compiles nothing; with PYTHONDONTWRITEBYTECODE set (as on
  # these machines) every CLI start would recompile the package from source.
  # Python caches bytecode beside the path it imports from: the strict install's
  # link tree, not the checkout's folders.
  python3 -m compileall -q "$(python3 -c 'import dsh.sandbox, os; print(os.path.dirname(os.path.dirname(dsh.sandbox.__file__)))')" >/dev/null
}
setup "pip install -e .[all,test]" install_project

# The venvs below install the project itself, not a link to the checkout.  Two
# pip installs of one source tree at once share setuptools' `build/` folder in
# it and break each other (a file copied by one is gone when the other looks),
# so the checkout is built into a wheel once, here, and both install that.
whole=0; [ "$#" = 0 ] && whole=1
project_wheel=""
build_project_wheel() {
  python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$root" && chmod -R a+rX "$wheels"
}
if { [ "$(id -u)" = 0 ] && [ -z "${DSH_NOBODY_PYTHON:-}" ]; } || [ "$whole" = 1 ]; then
  # `setup` runs its command in a subshell: the folder is chosen out here.
  wheels="$(mktemp -d /var/tmp/dsh-wheel.XXXXXX)"
  on_exit+=('rm -rf "$wheels"')
  setup "wheel of the checkout" build_project_wheel
  project_wheel="$(echo "$wheels"/*.whl)"
fi

# Tests that run the CLI as nobody need an interpreter and an install nobody can
# read: this python3 may live under /root (mode 0700), a venv too.  A copy in a
# venv of Debian's own python, outside /root, serves them and the conformance
# run; it is built while the Docker daemon starts and the static checks run.
nobody_venv_build() {
  /usr/bin/python3 -m venv "$nobody_venv" && "$nobody_venv/bin/pip" install -q --disable-pip-version-check "$project_wheel[all,test]" \
    && chmod -R a+rX "$nobody_venv"
}
if [ "$(id -u)" = 0 ] && [ -z "${DSH_NOBODY_PYTHON:-}" ]; then
  nobody_venv="$(mktemp -d /var/tmp/dsh-nobody-venv.XXXXXX)"
  on_exit+=('rm -rf "$nobody_venv"')
  background nobody "venv for nobody" nobody_venv_build
  export DSH_NOBODY_PYTHON="$nobody_venv/bin/python"
fi

# Docker daemon + the locally built runner image (never pulled).
setup "docker daemon and image" bash "$root/.ci/docker-setup.sh"

# cgroup-v1 and cgroup-v2: a writable hierarchy of each version, as CI's hybrid
# machine has (the v2 one at /sys/fs/cgroup/unified, without controllers).
export DSH_REQUIRE="${DSH_REQUIRE-landlock,bwrap,docker,e2b,gvisor,cgroup,cgroup-v1,cgroup-v2}"

# -- checks -------------------------------------------------------------------
# The fresh-machine check copies in `git archive HEAD` and needs root; it is
# mostly downloads, so it runs beside the other checks.
if [ "$whole" = 1 ] && [ "${DSH_FRESH_MACHINE:-}" = 1 ]; then
  background fresh "fresh machine (the README's first command)" env DSH_REQUIRE="$DSH_REQUIRE,fresh-machine" \
    python3 -m pytest -q -p no:cacheprovider -m slow "$root/tests/cli/test_fresh_machine.py"
fi
# The e2b floor in pyproject.toml is a claim: prove it with exactly that SDK
# version against the envd double (whole-suite runs only; pip's cache is reused).
floor_venv_build() {
  local floor
  floor="$(python3 -c 'import tomllib, sys; deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["e2b"]; print(next(d for d in deps if d.startswith("e2b>=")).removeprefix("e2b>="))' "$root/pyproject.toml")" || return
  echo "e2b==$floor"
  # The terminal extra too: the e2b tests drive terminal sessions.
  python3 -m venv "$floor_venv" && "$floor_venv/bin/pip" install -q --disable-pip-version-check "$project_wheel[test,terminal]" "e2b==$floor"
}
if [ "$whole" = 1 ]; then
  floor_venv="$(mktemp -d /var/tmp/dsh-e2b-floor.XXXXXX)"
  on_exit+=('rm -rf "$floor_venv"')
  background floor "venv with the e2b SDK floor" floor_venv_build
fi

stage "ruff" python3 -m ruff check cli sandbox runners executors tools profiles tests
stage "import layers" lint-imports --no-cache
# On the installed package, from outside the checkout so the folders (which are
# not the import names) cannot shadow it.
mypy_strict() {
  (cd / && python3 -m mypy --strict --config-file "$root/pyproject.toml" \
    -p dsh.cli -p dsh.sandbox -p dsh.runners -p dsh.executors -p dsh.tools -p dsh.profiles)
}
stage "mypy --strict" mypy_strict
# The tests (and conformance) that run as nobody need its venv.
if [ -n "${bg_pid[nobody]:-}" ]; then
  collect nobody || { summary+=("(setup failed: the stages after it did not run)"); finish; }
fi
# Under a login session's soft limit of 1,024 descriptors, as a user's machine
# has it (these machines allow far more): a runner or a test that keeps
# descriptors fails here, not on the user's machine.
as_a_login_session() ( ulimit -Sn 1024 && "$@" )
# The fresh-machine test runs in its own stage above, never twice.
stage "pytest (1,024 descriptors)" as_a_login_session env -u DSH_FRESH_MACHINE python3 -m pytest -q -p no:cacheprovider "$@"
if [ "$whole" = 1 ]; then
  collect floor || true
  floor_tests() {
    (cd "$root" && "$floor_venv/bin/python" -m pytest -q -p no:cacheprovider tests/runners/e2b)
  }
  # Mostly waiting on the envd double: it runs beside conformance, not before it.
  if grep -q '^e2b==' "$logs/floor.log" && [ -x "$floor_venv/bin/python" ]; then
    background floor_tests "e2b SDK floor ($(grep '^e2b==' "$logs/floor.log"))" floor_tests
  else
    record "e2b SDK floor" skipped 0
  fi
fi
if [ "$whole" = 1 ]; then
  stage "conformance (as root and as nobody; 1,024 descriptors)" as_a_login_session bash "$root/.ci/conformance"
fi
if [ -n "${bg_pid[floor_tests]:-}" ]; then collect floor_tests || true; fi
if [ -n "${bg_pid[fresh]:-}" ]; then collect fresh || true; fi
finish
