#!/usr/bin/env bash
# herd over ssh: a real sshd from Debian's openssh-server on a high loopback
# port, with a key made for the test. Checks that workers start through it
# (at the same path, and shipped with --ship), that an agent restarts a
# killed worker and an agent killed mid-run loses its workers as one (their
# tasks run on the other host, none of its processes is left), that a host
# that cannot be reached stops the run with an error naming it (or is
# skipped with --allow-partial), that a bad hosts entry is named, and that
# no worker process is left behind.
source "$(dirname "$0")/lib.sh"
need_root

make_ssh_keys
PORT=$(free_port)
write_sshd_config "$WORK/sshd_config" 127.0.0.1
/usr/sbin/sshd -D -e -f "$WORK/sshd_config" -p "$PORT" 2>"$WORK/sshd.log" &
SSHD=$!
cleanup "kill $SSHD; wait $SSHD"
wait_port "$PORT" 10 || fail "sshd did not start: $(cat "$WORK/sshd.log")"
SSH="ssh -p $PORT $SSH_OPTIONS"
$SSH root@127.0.0.1 true || fail "ssh with the test key does not work: $(cat "$WORK/sshd.log")"
make_secret
before=$(herd_processes | wc -l)

run_demo() {
  timeout 120 "$HERD_BIN" demo --fib 25 --tasks 60 --secret-file "$WORK/secret" --ssh "$SSH" \
    --start-timeout 20 "$@"
}

log "two workers on one host over ssh"
run_demo --hosts root@127.0.0.1:2 >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/err"; fail "ssh run failed"; }
grep -q "complete and correct" "$WORK/out" || fail "results not complete: $(cat "$WORK/out")"
grep -q "starting with 2 workers" "$WORK/err" || fail "expected 2 workers: $(cat "$WORK/err")"

log "the same with the executable shipped first"
shipped_dir=/root/.herd/bin
existing=$(ls "$shipped_dir" 2>/dev/null || true)
cleanup "cd $shipped_dir && for f in *; do case \" $existing \" in *\" \$f \"*) ;; *) rm -f \"\$f\";; esac; done"
run_demo --hosts root@127.0.0.1:2 --ship >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/err"; fail "shipped run failed"; }
grep -q "complete and correct" "$WORK/out" || fail "results not complete after --ship"
ls "$shipped_dir" | grep -q -- "-" || fail "no shipped executable in $shipped_dir"

log "a worker killed on an ssh host is restarted by its agent, and the run completes"
timeout 120 "$HERD_BIN" demo --fib 32 --tasks 300 --secret-file "$WORK/secret" --ssh "$SSH" \
  --start-timeout 20 --hosts root@127.0.0.1:2 >"$WORK/out" 2>"$WORK/err" &
DEMO=$!
for i in $(seq 200); do grep -q "starting with 2 workers" "$WORK/err" && break; sleep 0.05; done
grep -q "starting with 2 workers" "$WORK/err" || fail "workers did not join: $(cat "$WORK/err")"
# (the agent is looked for a few times, so that a moment between the
# master's word that the workers joined and the process list fails nothing)
agent=""
for _ in $(seq 50); do
  for p in $(pgrep -f -- "$HERD_BIN" || true); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^HERD_AGENT='; then agent=$p; fi
  done
  [ -n "$agent" ] && break
  sleep 0.1
done
[ -n "$agent" ] || fail "no agent process found"
victim=$(pgrep -P "$agent" | head -1)
[ -n "$victim" ] || fail "the agent has no worker"
kill -9 "$victim"
wait $DEMO || fail "the run failed after a worker was killed: $(cat "$WORK/err")"
grep -q "complete and correct" "$WORK/out" || fail "results not complete after the kill: $(cat "$WORK/out")"
grep -q "herd agent: local worker.*was killed by signal 9; restarting it" "$WORK/err" \
  || fail "the agent did not restart its worker: $(cat "$WORK/err")"

log "an agent killed mid-run loses its workers as one: their tasks run on the other host, nothing of it is left"
timeout 120 "$HERD_BIN" demo --fib 32 --tasks 300 --secret-file "$WORK/secret" --ssh "$SSH" \
  --start-timeout 20 --hosts root@127.0.0.1:2,root@localhost:2 >"$WORK/out" 2>"$WORK/err" &
DEMO=$!
for i in $(seq 200); do grep -q "starting with 4 workers" "$WORK/err" && break; sleep 0.05; done
grep -q "starting with 4 workers" "$WORK/err" || fail "workers did not join: $(cat "$WORK/err")"
agents=()
for p in $(pgrep -f -- "$HERD_BIN" || true); do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^HERD_AGENT='; then agents+=("$p"); fi
done
[ "${#agents[@]}" -eq 2 ] || fail "expected two agents, found ${#agents[@]}"
doomed=${agents[0]}
its_workers=$(pgrep -P "$doomed" | tr '\n' ' ')
[ -n "$its_workers" ] || fail "the agent to kill has no worker"
kill -9 "$doomed"
wait $DEMO || fail "the run failed after an agent was killed: $(cat "$WORK/err")"
grep -q "complete and correct" "$WORK/out" || fail "results not complete after the agent's kill: $(cat "$WORK/out")"
grep -q "its host agent's link was lost" "$WORK/err" || fail "the master did not see the host link's loss: $(cat "$WORK/err")"
for w in $its_workers; do
  for i in $(seq 40); do kill -0 "$w" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$w" 2>/dev/null && fail "worker $w of the killed agent is still running"
done

log "a host that cannot be reached stops the run, naming it"
if run_demo --hosts root@127.0.0.1:1,nohost.invalid:1 >"$WORK/out" 2>"$WORK/err"; then
  fail "a run with an unreachable host succeeded without --allow-partial"
fi
grep -q "nohost.invalid" "$WORK/err" || fail "the error does not name the host: $(cat "$WORK/err")"

log "with --allow-partial the run goes on with the hosts that started"
run_demo --hosts root@127.0.0.1:1,nohost.invalid:1 --allow-partial >"$WORK/out" 2>"$WORK/err" \
  || { cat "$WORK/err"; fail "partial run failed"; }
grep -q "complete and correct" "$WORK/out" || fail "partial run incomplete"
grep -q "going on without.*nohost.invalid" "$WORK/err" || fail "partial run does not name the failed host"

log "a hosts entry that does not parse is named"
if "$HERD_BIN" demo --hosts "good:2,bad:x" >"$WORK/out" 2>"$WORK/err"; then fail "bad hosts entry accepted"; fi
grep -q "bad:x" "$WORK/err" || fail "the error does not name the entry: $(cat "$WORK/err")"

sleep 0.5
after=$(herd_processes | wc -l)
[ "$after" -le "$before" ] || fail "herd processes left behind: $(herd_processes | xargs -r ps -o pid,args -p)"
# the shipped copies run under another name: they must be gone too
shipped_left=$(pgrep -f -- "$shipped_dir/" || true)
[ -z "$shipped_left" ] || fail "shipped herd processes left behind: $(echo "$shipped_left" | xargs -r ps -o pid,args -p)"
