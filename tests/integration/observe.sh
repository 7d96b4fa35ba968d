#!/usr/bin/env bash
# Watching a running cluster from outside, as an operator would. Checks:
#  1. `herd demo --dashboard 127.0.0.1:PORT` answers GET /api/status with
#     JSON listing each worker, and GET /metrics with a
#     herd_tasks_completed_total that rises between two requests;
#  2. `+RTS -l` leaves an eventlog for the master and for each worker, with
#     herd's events in them (batches and packets on the master, batches
#     run on each worker).
# HTTP goes through bash's /dev/tcp, so no client program is needed.
source "$(dirname "$0")/lib.sh"

http_get() {   # http_get PORT PATH: the body
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  reply=$(cat <&3)
  exec 3<&-
  printf '%s' "$reply" | tr -d '\r' | sed '1,/^$/d'
}

# --- the dashboard during a demo -------------------------------------------
PORT=$(free_port)
"$HERD_BIN" demo --fib 30 --tasks 3000 --dashboard "127.0.0.1:$PORT" >"$WORK/out" 2>"$WORK/err" &
MASTER=$!
cleanup "kill -9 $MASTER"
wait_port "$PORT" 30 || fail "the dashboard did not listen: $(cat "$WORK/err")"
for i in $(seq 200); do grep -q "all cores: " "$WORK/out" && break; sleep 0.05; done
WORKERS=$(sed -n 's/.*all cores: \([0-9]*\) worker process.*/\1/p' "$WORK/out")
[ -n "$WORKERS" ] || fail "the demo did not start its workers: $(cat "$WORK/err")"
sleep 1
STATUS=$(http_get "$PORT" /api/status) || fail "GET /api/status failed"
case "$STATUS" in '{'*'}') ;; *) fail "GET /api/status is not one JSON object: ${STATUS:0:200}" ;; esac
LISTED=$(printf '%s' "$STATUS" | grep -o '"state":"[a-z]*"' | wc -l)
[ "$LISTED" -eq "$WORKERS" ] || fail "/api/status lists $LISTED workers, the demo started $WORKERS"
printf '%s' "$STATUS" | grep -q '"function":"fib' || fail "/api/status shows no running farm job"
first=$(http_get "$PORT" /metrics | sed -n 's/^herd_tasks_completed_total \([0-9]*\)$/\1/p')
sleep 1
second=$(http_get "$PORT" /metrics | sed -n 's/^herd_tasks_completed_total \([0-9]*\)$/\1/p')
[ -n "$first" ] && [ -n "$second" ] || fail "no herd_tasks_completed_total in /metrics"
[ "$second" -gt "$first" ] || fail "herd_tasks_completed_total did not rise: $first then $second"
log "/api/status listed $LISTED workers; herd_tasks_completed_total rose from $first to $second in 1 s"
wait $MASTER || fail "the demo failed: $(tail -5 "$WORK/err")"

# --- eventlogs -------------------------------------------------------------
mkdir "$WORK/events"
( cd "$WORK/events" && "$HERD_BIN" demo --fib 20 --tasks 200 --workers 2 +RTS -l -olmaster.eventlog -RTS \
    >"$WORK/out2" 2>"$WORK/err2" ) || fail "the traced demo failed: $(tail -5 "$WORK/err2")"
count() { grep -ao "$2" "$1" | wc -l; }
[ -s "$WORK/events/master.eventlog" ] || fail "no master eventlog"
[ "$(count "$WORK/events/master.eventlog" 'herd batch [0-9]* of job')" -gt 0 ] || fail "no batch events in the master's eventlog"
[ "$(count "$WORK/events/master.eventlog" 'herd packet out')" -gt 0 ] || fail "no packet events in the master's eventlog"
# the demo runs one worker, then two: three worker processes in all
WORKER_LOGS=$(ls "$WORK/events" | grep -c '^herd-worker-[0-9]*-[0-9]*\.eventlog$' || true)
[ "$WORKER_LOGS" -eq 3 ] || fail "expected 3 worker eventlogs, found $WORKER_LOGS: $(ls "$WORK/events")"
for f in "$WORK"/events/herd-worker-*.eventlog; do
  [ "$(count "$f" 'herd worker batch [0-9]* done')" -gt 0 ] || fail "no batch events in $(basename "$f")"
done
log "eventlogs: master with $(count "$WORK/events/master.eventlog" 'herd batch [0-9]* of job') batch events, $WORKER_LOGS workers each with their batches"
