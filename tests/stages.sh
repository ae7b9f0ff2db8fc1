# The stages of tests/run.sh, sourced by it (and by its tests): every check
# runs even when an earlier one failed, a summary of all of them ends the run.
#
#   stage NAME CMD...        a check: a failure is recorded, the run goes on
#   setup NAME CMD...        a step the rest needs: a failure ends the run
#                            (with the summary); it ticks while it runs
#   background ID NAME CMD...  a check started beside the others (its output
#                            kept in $logs/ID.log); `collect ID` waits for it,
#                            prints its output, records it and returns its status
#   finish                   prints the summary; exits 1 if anything failed
#
# Needs $logs (a directory for the background logs).  DSH_TICK_S sets how
# often a long step says it is still running (default 30 s).
tick="${DSH_TICK_S:-30}"
started=$SECONDS
summary=()
failed=0

# record NAME STATUS SECONDS: one line of the summary.
record() {
  local verdict=ok
  if [ "$2" = skipped ]; then verdict="not run"
  elif [ "$2" != 0 ]; then verdict="FAILED (exit $2)"; failed=1
  fi
  summary+=("$(printf '%-44s %-18s %5d s' "$1" "$verdict" "$3")")
  echo "-- $1: $verdict in $3 s"
}

# ticking LABEL CMD...: run CMD, printing a line every $tick s while it runs, so a
# step that takes minutes does not look hung.  Returns CMD's status.
ticking() {
  local label="$1"; shift
  "$@" &
  ticking_wait "$label" "$!" "$SECONDS"
}
# ticking_wait LABEL PID BEGIN: wait for PID (a child of this shell), ticking.
ticking_wait() {
  local label="$1" pid="$2" begin="$3"
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq "$tick"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then echo "   ... $label: still running ($((SECONDS - begin)) s)"; fi
  done
  wait "$pid"
}

# stage NAME CMD...: a check; a failure is recorded and the run goes on.
stage() {
  local name="$1"; shift
  local begin=$SECONDS status=0
  echo "== $name"
  "$@" || status=$?
  record "$name" "$status" "$((SECONDS - begin))"
  return 0
}

# setup NAME CMD...: a step everything after it needs; a failure ends the run
# with the summary.
setup() {
  local name="$1"; shift
  local begin=$SECONDS status=0
  echo "== $name"
  ticking "$name" "$@" || status=$?
  record "$name" "$status" "$((SECONDS - begin))"
  if [ "$status" != 0 ]; then
    summary+=("(setup failed: the stages after it did not run)")
    finish
  fi
}

# background ID NAME CMD...: start a check beside the others, its output in
# $logs/ID.log; `collect ID` waits for it, prints the log and records it.
declare -A bg_pid bg_start bg_name
background() {
  local id="$1" name="$2"; shift 2
  echo "== $name (started in the background; its output follows when it ends)"
  bg_name[$id]="$name"
  bg_start[$id]=$SECONDS
  # Its own running time goes to $logs/ID.secs: collecting may come later.
  ( begin=$SECONDS; status=0; "$@" || status=$?; echo "$((SECONDS - begin))" >"$logs/$id.secs"; exit "$status" ) \
    >"$logs/$id.log" 2>&1 </dev/null &
  bg_pid[$id]=$!
}
collect() {
  local id="$1" status=0 took
  ticking_wait "${bg_name[$id]}" "${bg_pid[$id]}" "${bg_start[$id]}" || status=$?
  echo "== ${bg_name[$id]} (output)"
  cat "$logs/$id.log"
  took="$(cat "$logs/$id.secs" 2>/dev/null || echo "$((SECONDS - bg_start[$id]))")"
  record "${bg_name[$id]}" "$status" "$took"
  return "$status"
}

finish() {
  echo
  echo "== summary ($((SECONDS - started)) s in all)"
  printf '%s\n' "${summary[@]}"
  if [ "$failed" != 0 ]; then echo "tests/run.sh: FAILED"; exit 1; fi
  echo "tests/run.sh: every stage passed"
  exit 0
}
