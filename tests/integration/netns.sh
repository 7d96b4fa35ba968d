#!/usr/bin/env bash
# herd across hosts, with network namespaces as the hosts: a master in one
# namespace, a worker in each of two others, joined by veth pairs, each
# worker connecting over its own address. Mid-run one worker's link is cut
# (ip link set down). The master must notice within its liveness timeout
# (default 4 s), run that worker's tasks on the other, and return complete
# results. Prints the time from the cut to the tasks running elsewhere.
source "$(dirname "$0")/lib.sh"
need_root

make_two_hosts 231
make_secret
PORT=7411

# About 12 s of work for two workers (fib 31 takes about 3 ms here), so the
# job still has tasks to hand out well after the liveness timeout: a job
# with none left would copy the cut worker's batches to the other worker
# (stragglers) and end before its loss is noticed.
ip netns exec $M timeout 120 "$HERD_BIN" demo --fib 31 --tasks 3600 --listen 0.0.0.0:$PORT \
  --wait-workers 2 --secret-file "$WORK/secret" >"$WORK/out" 2>"$WORK/err" &
MASTER=$!
cleanup "kill $MASTER"
for i in $(seq 100); do grep -q "master listening" "$WORK/err" && break; sleep 0.05; done
grep -q "master listening" "$WORK/err" || fail "the master did not start: $(cat "$WORK/err")"

ip netns exec $A "$HERD_BIN" worker --connect 10.231.1.1:$PORT --secret-file "$WORK/secret" 2>"$WORK/a.err" &
WA=$!; cleanup "kill -9 $WA"
ip netns exec $B "$HERD_BIN" worker --connect 10.231.2.1:$PORT --secret-file "$WORK/secret" 2>"$WORK/b.err" &
WB=$!; cleanup "kill -9 $WB"

for i in $(seq 200); do grep -q "starting with 2 workers" "$WORK/err" && break; sleep 0.05; done
grep -q "starting with 2 workers" "$WORK/err" || fail "workers did not join: $(cat "$WORK/err" "$WORK/a.err" "$WORK/b.err")"
sleep 2
cut=$(date +%s.%N)
ip -n $A link set veth0 down
log "cut the link of the worker in namespace A"

wait $MASTER || fail "the master failed: $(cat "$WORK/err")"
grep -q "complete and correct" "$WORK/out" || fail "results incomplete: $(cat "$WORK/out")"
# herd's log lines start with a local ISO 8601 time: as seconds since 1970
stamp() { grep -m1 "$1" "$WORK/err" | cut -d' ' -f1; }
seconds() { date -d "$1" +%s.%N; }
lost=$(stamp "herd: worker .* lost")
rerun=$(stamp "re-sent to worker")
[ -n "$lost" ] || fail "the master never noticed the cut: $(cat "$WORK/err")"
[ -n "$rerun" ] || fail "the lost worker's tasks were never re-sent: $(cat "$WORK/err")"
lost=$(seconds "$lost") || fail "not a time: $lost"
rerun=$(seconds "$rerun") || fail "not a time: $rerun"
noticed=$(awk -v a="$lost" -v b="$cut" 'BEGIN { printf "%.3f", a - b }')
moved=$(awk -v a="$rerun" -v b="$cut" 'BEGIN { printf "%.3f", a - b }')
printf '     netns: link cut -> worker declared lost: %.2f s; -> its tasks running elsewhere: %.2f s (liveness timeout 4 s)\n' "$noticed" "$moved"
grep "tasks in" "$WORK/out" | sed "s/^/     /"
awk -v m="$moved" 'BEGIN { exit !(m <= 6.0) }' || fail "took $moved s to re-run the lost worker's tasks (limit 6 s)"
# and not before the liveness timeout could have fired: an earlier loss
# would mean something else than liveness noticed (or a wrong clock)
awk -v n="$noticed" 'BEGIN { exit !(n >= 3.5) }' || fail "declared lost $noticed s after the cut, before the 4 s liveness timeout"
