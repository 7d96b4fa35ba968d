#!/usr/bin/env bash
# herd across two worker hosts reached over real ssh: network namespaces
# as the hosts (a master in one, an sshd in each of two others, joined by
# veth pairs), each worker host started by the master's ssh launch and
# carried on one host link by its agent. Mid-farm, a worker on host A is
# killed with SIGKILL (its agent restarts it) and the agent of host B is
# killed with SIGKILL (its workers are lost as one, their tasks run on A,
# and no process is left in B). The farm must return every result exactly
# once (the demo checks each one), and the master must keep one link per
# host.
source "$(dirname "$0")/lib.sh"
need_root

# both hosts reach the master at the address it advertises (10.232.1.1)
make_two_hosts 232

make_ssh_keys
for h in a b; do
  if [ $h = a ]; then ns=$A; addr=10.232.1.2; else ns=$B; addr=10.232.2.2; fi
  write_sshd_config "$WORK/sshd_$h" $addr
  ip netns exec $ns /usr/sbin/sshd -D -e -f "$WORK/sshd_$h" -p 22 2>"$WORK/sshd_$h.log" &
  pid=$!
  cleanup "kill $pid"
done
SSH="ssh $SSH_OPTIONS -o ConnectTimeout=5"
for addr in 10.232.1.2 10.232.2.2; do
  ok=""
  for i in $(seq 100); do
    if ip netns exec $M $SSH root@$addr true 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [ -n "$ok" ] || fail "ssh to $addr does not work: $(cat "$WORK"/sshd_*.log)"
done
make_secret

# About 15 s of work on four workers, so that the kills land mid-farm
ip netns exec $M timeout 180 "$HERD_BIN" demo --fib 32 --tasks 1200 --secret-file "$WORK/secret" \
  --ssh "$SSH" --hosts root@10.232.1.2:2,root@10.232.2.2:2 --advertise 10.232.1.1 --start-timeout 30 \
  --dashboard 127.0.0.1:0 >"$WORK/out" 2>"$WORK/err" &
MASTER=$!
cleanup "kill $MASTER"
for i in $(seq 400); do grep -q "starting with 4 workers" "$WORK/err" && break; sleep 0.05; done
grep -q "starting with 4 workers" "$WORK/err" || fail "the workers did not join: $(cat "$WORK/err")"

# the master keeps one link per host, not one per worker
dport=$(grep -o "dashboard at http://127.0.0.1:[0-9]*" "$WORK/err" | head -1 | sed 's/.*://')
[ -n "$dport" ] || fail "the master logged no dashboard: $(cat "$WORK/err")"
links=$(ip netns exec $M bash -c "exec 3<>/dev/tcp/127.0.0.1/$dport; printf 'GET /api/status HTTP/1.0\r\n\r\n' >&3; cat <&3" \
        | grep -o '"links":[0-9]*' | cut -d: -f2)
[ "$links" = "2" ] || fail "expected 2 master links for 4 workers on 2 hosts, got '$links'"
log "4 workers on 2 hosts over $links master links"

agent_in() {
  for p in $(ip netns pids "$1"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^HERD_AGENT='; then echo "$p"; fi
  done
}
agent_a=$(agent_in $A | head -1)
agent_b=$(agent_in $B | head -1)
[ -n "$agent_a" ] && [ -n "$agent_b" ] || fail "no agent found on each host"
sleep 1
victim=$(pgrep -P "$agent_a" | head -1)
[ -n "$victim" ] || fail "host A's agent has no worker"
kill -9 "$victim"
log "killed worker $victim on host A"
sleep 1
kill -9 "$agent_b"
log "killed the agent of host B"

wait $MASTER || fail "the run failed: $(cat "$WORK/err")"
grep -q "complete and correct" "$WORK/out" || fail "results not complete: $(cat "$WORK/out")"
grep -q "herd agent: local worker.*was killed by signal 9; restarting it" "$WORK/err" \
  || fail "host A's agent did not restart its worker: $(cat "$WORK/err")"
grep -q "its host agent's link was lost" "$WORK/err" || fail "the master did not lose host B's link: $(cat "$WORK/err")"
# nothing of host B is left (sshd aside)
sleep 0.5
left=""
for p in $(ip netns pids $B); do
  case "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" in
    *sshd*) ;;
    "") ;;
    *) left="$left $p";;
  esac
done
[ -z "$left" ] || fail "processes left on host B: $(ps -o pid,args -p ${left// /,} 2>/dev/null)"
