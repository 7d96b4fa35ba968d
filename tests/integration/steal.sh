#!/usr/bin/env bash
# Work stealing across hosts, with network namespaces as the hosts: a
# master in one namespace, a worker in each of two others. The master runs
# one task whose children the workers steal from each other in turn
# (herd demo --relay: each child offers the next, then works 0.2 s before
# waiting for it), so each worker runs children spawned by children that
# were stolen from the other host. The answer must be exact, and each
# worker must have run stolen children and had its own stolen.
source "$(dirname "$0")/lib.sh"
need_root

make_two_hosts 233
make_secret
PORT=7413

ip netns exec $M timeout 120 "$HERD_BIN" demo --relay 8 --workers 0 --listen 0.0.0.0:$PORT \
  --wait-workers 2 --secret-file "$WORK/secret" >"$WORK/out" 2>"$WORK/err" &
MASTER=$!
cleanup "kill $MASTER"
for i in $(seq 100); do grep -q "master listening" "$WORK/err" && break; sleep 0.05; done
grep -q "master listening" "$WORK/err" || fail "the master did not start: $(cat "$WORK/err")"

ip netns exec $A "$HERD_BIN" worker --connect 10.233.1.1:$PORT --secret-file "$WORK/secret" 2>"$WORK/a.err" &
WA=$!; cleanup "kill -9 $WA"
ip netns exec $B "$HERD_BIN" worker --connect 10.233.2.1:$PORT --secret-file "$WORK/secret" 2>"$WORK/b.err" &
WB=$!; cleanup "kill -9 $WB"

wait $MASTER || fail "the master failed: $(cat "$WORK/out" "$WORK/err" "$WORK/a.err" "$WORK/b.err")"
grep -q "a relay of 8 children: exact" "$WORK/out" || fail "the relay's answer: $(cat "$WORK/out")"
# one line per worker: 'HOST/PID ran R stolen children, S of its children were stolen'
lines=$(grep -c " ran [0-9]* stolen children, [0-9]* of its children were stolen" "$WORK/out")
[ "$lines" -eq 2 ] || fail "expected a line for each of the two workers: $(cat "$WORK/out")"
if grep -q " ran 0 stolen children\| 0 of its children were stolen" "$WORK/out"; then
  fail "a worker neither stole nor was stolen from: $(cat "$WORK/out")"
fi
sed 's/^/     /' "$WORK/out"
log "children stolen back and forth between two hosts, the answer exact"
