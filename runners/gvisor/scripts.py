"""The two scripts run inside the sandbox: the exec wrapper and the tree killer.

``runsc exec`` has no kill for a process tree, only for one pid or for every
process of the sandbox, so each command runs as
``/bin/sh -c WRAPPER sh ARGV...`` with ``DSH_SANDBOX_EXEC=<marker>`` in its
environment, which every process it starts inherits.  The wrapper ``exec``s
the argv (separate arguments, never joined), after the same check the other
runners make: a program that cannot be executed gets the local executor's
message and status.

The killer (bash, builtins only, run by another ``runsc exec``) signals every
live process that carries the marker, and every descendant of one (this
catches the children of an ``env -i`` command).  For SIGKILL it repeats until
nothing is left, so a forking tree cannot outrun it for long.  A command that
clears its environment AND leaves its parent (double fork) is not found; it
dies with the sandbox, at the end of the session.
"""

from __future__ import annotations

from dsh.sandbox.runner import EXEC_CHECK_SH

MARKER_VAR = "DSH_SANDBOX_EXEC"

WRAPPER = EXEC_CHECK_SH + 'exec "$@"'

# For an argv that is not UTF-8: every item arrives as an ASCII printf format
# (the OCI process file is JSON text) and is decoded in place before the exec.
# The ``_`` keeps trailing newlines, which command substitution would strip.
DECODE = 'for _a do shift; _a=$(printf -- "${_a}_"); set -- "$@" "${_a%_}"; done; '
WRAPPER_DECODING = DECODE + WRAPPER

KILLER = r"""
marker="DSH_SANDBOX_EXEC=$1" sig=$2
for ((pass = 0; pass < 500; pass++)); do
  declare -A parent=() hit=()
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [[ $pid == "$$" || $pid == 1 ]] && continue
    state= ppid=
    while read -r key value _; do
      case $key in State:) state=$value ;; PPid:) ppid=$value; break ;; esac
    done < "$dir/status" 2>/dev/null
    [[ -z $ppid || $state == Z || $state == X ]] && continue
    parent[$pid]=$ppid
    while IFS= read -r -d '' entry; do
      if [[ $entry == "$marker" ]]; then hit[$pid]=1; break; fi
    done < "$dir/environ" 2>/dev/null
  done
  changed=1
  while ((changed)); do
    changed=0
    for pid in "${!parent[@]}"; do
      if [[ -z ${hit[$pid]} && -n ${hit[${parent[$pid]}]} ]]; then hit[$pid]=1; changed=1; fi
    done
  done
  ((${#hit[@]} == 0)) && exit 0
  kill "-$sig" "${!hit[@]}" 2>/dev/null
  [[ $sig == 9 ]] || exit 0
done
exit 1
"""
