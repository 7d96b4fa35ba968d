#!/usr/bin/env bash
# herd's shared-memory transport under SIGKILL. Local workers are linked to
# the master by shared rings (the default). Checks:
#  1. the rings are in use (the master maps herd's memfd segments);
#  2. a worker killed with SIGKILL mid-run does not wedge the master: the
#     run finishes, with the dead worker's tasks run by the other;
#  3. when the master itself is killed with SIGKILL in its two-worker run,
#     both workers exit within a few seconds;
#  4. nothing is left behind in /dev/shm after either kill, but the killed
#     master's directory for parts handed between its workers, which the
#     next master started on the host removes.
source "$(dirname "$0")/lib.sh"

[ -d /dev/shm ] || fail "no /dev/shm on this machine"
ls -A /dev/shm | sort > "$WORK/shm.before"

wait_for() {   # wait_for FILE PATTERN SECONDS
  local i
  for (( i=0; i<$3*20; i++ )); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}

# --- a worker killed mid-run -------------------------------------------
"$HERD_BIN" demo --fib 25 --tasks 8000 --workers 2 --transport shm >"$WORK/out1" 2>"$WORK/err1" &
MASTER=$!
cleanup "kill -9 $MASTER"
wait_for "$WORK/out1" "all cores: 2 worker processes" 60 || fail "the parallel run did not start: $(cat "$WORK/err1")"
grep -q "memfd:herd-link" /proc/$MASTER/maps || fail "the master maps no shared ring"
VICTIM=$(pgrep -P $MASTER | head -1)
[ -n "$VICTIM" ] || fail "no worker process found"
kill -9 "$VICTIM"
killed_at=$(date +%s.%N)
log "killed worker process $VICTIM"
for i in $(seq 600); do kill -0 $MASTER 2>/dev/null || break; sleep 0.05; done
kill -0 $MASTER 2>/dev/null && fail "the master is still running 30 s after a worker was killed"
wait $MASTER || fail "the run failed after a worker was killed: $(tail -5 "$WORK/err1")"
grep -q "lost" "$WORK/err1" || fail "the master did not report the lost worker"
grep -q "all cores" "$WORK/out1" || fail "no result table"
log "the run finished $(awk -v a="$killed_at" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the kill; $(grep -m1 'lost' "$WORK/err1")"

# --- the master killed ---------------------------------------------------
# killed in the demo's second run, so that both workers (each with its own
# ring) must notice; the first run takes about twice as long as the second
"$HERD_BIN" demo --fib 27 --tasks 4000 --workers 2 --transport shm >"$WORK/out2" 2>"$WORK/err2" &
MASTER=$!
cleanup "kill -9 $MASTER"
wait_for "$WORK/out2" "all cores: 2 worker processes" 120 || fail "the parallel run did not start: $(cat "$WORK/err2")"
WORKERS=$(pgrep -P $MASTER | tr '\n' ' ')
[ "$(echo $WORKERS | wc -w)" -eq 2 ] || fail "expected 2 worker processes, found: $WORKERS"
for w in $WORKERS; do cleanup "kill -9 $w"; done
kill -9 $MASTER
wait $MASTER 2>/dev/null || true
log "killed the master; its workers: $WORKERS"
for i in $(seq 100); do
  left=""
  for w in $WORKERS; do kill -0 "$w" 2>/dev/null && left="$left $w"; done
  [ -z "$left" ] && break
  sleep 0.05
done
[ -z "$left" ] || fail "workers still running 5 s after the master was killed:$left"

ls -A /dev/shm | sort > "$WORK/shm.killed"
comm -13 "$WORK/shm.before" "$WORK/shm.killed" | grep -v "^herd-parts-$MASTER-" > "$WORK/shm.stray" || true
[ -s "$WORK/shm.stray" ] && fail "files left in /dev/shm: $(cat "$WORK/shm.stray")"
# the next master sweeps what the killed one left
"$HERD_BIN" demo --fib 10 --tasks 20 --workers 1 >"$WORK/out3" 2>"$WORK/err3" || fail "a run after the kill failed: $(tail -5 "$WORK/err3")"
ls -A /dev/shm | sort > "$WORK/shm.after"
# (what other runs left before may be gone too)
left=$(comm -13 "$WORK/shm.before" "$WORK/shm.after")
[ -z "$left" ] || fail "files left in /dev/shm after the next run: $left"
log "workers gone; the next master removed the killed one's parts directory; /dev/shm unchanged"
