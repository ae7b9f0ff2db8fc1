"""The two in-container scripts: the exec wrapper and the tree killer.

Docker has no exec kill, so each command runs as
``/bin/sh -c WRAPPER sh SLOT ARGV...``: the wrapper records
``<pid> <start time> <marker>`` in ``/run/dsh-sandbox/<slot>`` and ``exec``s the
argv (passed as separate arguments, never joined), so the command keeps the
wrapper's pid.  Every process of the command also inherits
``DSH_SANDBOX_EXEC=<marker>`` from the exec's environment.

The killer (bash, builtins only, run as another exec) signals every live
process that carries the marker in its environment (this catches double-forked
daemons reparented to init and ``setsid`` escapes) plus the recorded root and
all its descendants (this catches children of an ``env -i`` command).  When a
command has exited it also kills every orphan: every child of init but the
keep-alive (the first one started), with its descendants, unless it carries
the marker of another command still running (a pid file whose process is
still that command's root, an exec whose parent lies outside the container).
An ``env -i`` daemon that ``setsid``s away carries no marker and leaves the
tree, but is reparented to init: it goes.  The
pid file is trusted only if its marker matches and the process start time is
unchanged, so a reused slot or pid never redirects a kill.  The command may
write that directory: a pid file is opened read-write (a FIFO planted there
then never blocks the open) and read with a bound on time and length (nor the
read: a FIFO nobody writes, a link to ``/dev/zero``).  For SIGKILL it
repeats until nothing is left (a forking tree cannot outrun it for long).
"""

from __future__ import annotations

from dsh.sandbox.runner import EXEC_CHECK_SH

MARKER_VAR = "DSH_SANDBOX_EXEC"

# Shell variables set here are not exported, so the command's environment is
# exactly the exec's.  dash: field 22 of /proc/$$/stat is the start time; comm is "sh" (no spaces) here.
_RECORD = (
    "slot=$1; shift; "
    "read -r _p _c _s _pp _pg _se _tt _tp _f _mi _cmi _ma _cma _ut _st _cut _cst _pr _ni _nt "
    "_it start _rest < /proc/$$/stat && "
    # Opened read-write: a FIFO an earlier command left at the slot never blocks the open.
    'echo "$$ $start $' + MARKER_VAR + '" 1<> "/run/dsh-sandbox/$slot" 2>/dev/null; '
)
# A program that cannot be executed gets the local executor's message and status.
_EXEC = EXEC_CHECK_SH + 'exec "$@"'
WRAPPER = _RECORD + _EXEC

# For an argv that is not UTF-8: every item arrives as an ASCII printf format
# (see ``argv.py``) and is decoded in place before the exec.  The ``_`` keeps
# trailing newlines, which command substitution would strip.
DECODE = 'for _a do shift; _a=$(printf -- "${_a}_"); set -- "$@" "${_a%_}"; done; '
WRAPPER_DECODING = _RECORD + DECODE + _EXEC

KILLER = r"""
marker="DSH_SANDBOX_EXEC=$1" slot=$2 sig=$3 orphans=$4 root=
start_of() {  # field 22 of /proc/PID/stat, after the (comm) that may hold spaces
  local line rest f
  read -r line < "/proc/$1/stat" 2>/dev/null || return 1
  rest=${line##*) }
  read -r -a f <<< "$rest"
  printf -v REPLY '%s' "${f[19]}"
}
if read -t 1 -n 300 -r fpid fstart fmarker <> "/run/dsh-sandbox/$slot" 2>/dev/null \
   && [[ "DSH_SANDBOX_EXEC=$fmarker" == "$marker" ]] && start_of "$fpid" \
   && [[ $REPLY == "$fstart" ]]; then
  root=$fpid
fi
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
    if [[ $pid == "$root" ]]; then hit[$pid]=1; continue; fi
    while IFS= read -r -d '' entry; do
      if [[ $entry == "$marker" ]]; then hit[$pid]=1; break; fi
    done < "$dir/environ" 2>/dev/null
  done
  if [[ $orphans == orphans ]]; then
    # Children of init are the keep-alive (the first one started) and orphans;
    # a live exec's processes descend from a process whose parent is outside
    # the container (PPid 0) and are left alone.
    keep= keep_start=
    for pid in "${!parent[@]}"; do
      [[ ${parent[$pid]} == 1 ]] || continue
      start_of "$pid" || continue
      if [[ -z $keep ]] || ((REPLY < keep_start)); then keep=$pid keep_start=$REPLY; fi
    done
    # An orphan carrying the marker of another live command (its root still
    # the exec the daemon started: parent outside the container) is that
    # command's, killed when it ends; any other orphan goes now.
    declare -A live=()
    for f in /run/dsh-sandbox/*; do
      read -t 1 -n 300 -r lpid lstart lmarker <> "$f" 2>/dev/null || continue
      [[ "DSH_SANDBOX_EXEC=$lmarker" == "$marker" || ${parent[$lpid]} != 0 ]] && continue
      start_of "$lpid" && [[ $REPLY == "$lstart" ]] && live["DSH_SANDBOX_EXEC=$lmarker"]=1
    done
    for pid in "${!parent[@]}"; do
      [[ ${parent[$pid]} == 1 && $pid != "$keep" ]] || continue
      owned=
      while IFS= read -r -d '' entry; do
        if [[ -n ${live[$entry]} ]]; then owned=1; break; fi
      done < "/proc/$pid/environ" 2>/dev/null
      [[ -z $owned ]] && hit[$pid]=1
    done
  fi
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
