#!/usr/bin/env bash
# herd's own command line: a sub-command's bad flag is refused with that
# sub-command's usage, a bad value names its flag, and log lines start
# with a local ISO 8601 time. Needs HERD_BIN; starts nothing that lasts.
set -euo pipefail
H=${HERD_BIN:?set HERD_BIN to the herd executable}
fail() { echo "cli: $*" >&2; exit 1; }

if err=$("$H" demo --bogus 2>&1); then fail "herd demo accepted --bogus"; fi
grep -q "Invalid option \`--bogus'" <<<"$err" || fail "herd demo --bogus said: $err"
grep -q "^Usage: [^ ]* demo " <<<"$err" || fail "herd demo --bogus showed no demo usage: $err"

if err=$("$H" bench echo --items none 2>&1); then fail "herd bench echo accepted --items none"; fi
grep -q "^Usage: [^ ]* bench echo " <<<"$err" || fail "herd bench echo showed no echo usage: $err"

if err=$("$H" demo --workers many 2>&1); then fail "herd demo accepted --workers many"; fi
grep -q "option --workers: expected a worker count" <<<"$err" || fail "herd demo --workers many said: $err"

# each bad input names its cause, and nothing starts
expect_refused() {  # expect_refused NEEDLE ARGS...: herd demo ARGS fails, saying NEEDLE
  local needle=$1; shift
  local said
  if said=$(timeout 30 "$H" demo "$@" 2>&1); then fail "herd demo $* was accepted"; fi
  grep -qF -- "$needle" <<<"$said" || fail "herd demo $* did not say '$needle': $said"
}
expect_refused "--workers 0 starts no worker" --workers 0
expect_refused "entry 2 of 3 in the host list is empty" --hosts a,,b
expect_refused "invalid --hosts-file: /nonexistent/hosts: no such file" --hosts-file /nonexistent/hosts
expect_refused "invalid --secret-file: /nonexistent/secret: no such file" --secret-file /nonexistent/secret --workers 1
# a port the system picks, held by a listener of its own while herd tries it
busy_file=$(mktemp)
python3 -c "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); print(s.getsockname()[1]); sys.stdout.flush(); time.sleep(30)" >"$busy_file" &
holder=$!
for i in $(seq 100); do [ -s "$busy_file" ] && break; sleep 0.05; done
busy_port=$(cat "$busy_file"); rm -f "$busy_file"
[ -n "$busy_port" ] || fail "no port could be held for the --listen check"
expect_refused "cannot listen on 127.0.0.1:$busy_port (--listen)" --listen "127.0.0.1:$busy_port" --workers 1
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true

# a worker that cannot reach its master logs one stamped line and exits
if err=$(timeout 20 "$H" worker --connect 127.0.0.1:1 2>&1); then fail "a worker with no master exited 0"; fi
grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{2}:[0-9]{2} herd worker: ' <<<"$err" \
  || fail "the worker's log line has no ISO 8601 time: $err"

# a host joins a running master by hand with herd agent: its workers are
# kept up (one killed mid-run is restarted), the run completes over the
# agent's one host link, and the agent exits once the master is done
secret=$(mktemp)
chmod 600 "$secret"
head -c 32 /dev/urandom | base64 > "$secret"
out=$(mktemp); err=$(mktemp); agent_err=$(mktemp)
trap 'rm -f "$secret" "$out" "$err" "$agent_err"' EXIT
port=$(( 40000 + RANDOM % 20000 ))
[ "$port" != "$busy_port" ] || port=$(( port + 1 ))
timeout 120 "$H" demo --listen "127.0.0.1:$port" --wait-workers 2 --fib 32 --tasks 300 --secret-file "$secret" \
  >"$out" 2>"$err" &
demo=$!
sleep 0.5
timeout 120 "$H" agent --connect "127.0.0.1:$port" --workers 2 --secret-file "$secret" 2>"$agent_err" &
agent_timeout=$!
for i in $(seq 200); do grep -q "starting with 2 workers" "$err" && break; sleep 0.05; done
grep -q "starting with 2 workers" "$err" || fail "the agent's workers did not join: $(cat "$err" "$agent_err")"
agent=$(pgrep -P "$agent_timeout" | head -1)
victim=$(pgrep -P "$agent" | head -1)
[ -n "$victim" ] || fail "the agent has no worker"
kill -9 "$victim"
wait "$demo" || fail "the run failed after a worker under the agent was killed: $(cat "$err")"
grep -q "complete and correct" "$out" || fail "results incomplete: $(cat "$out")"
wait "$agent_timeout" || fail "the agent did not exit by itself once its workers ended: $(cat "$agent_err")"
grep -q "herd agent: local worker.*was killed by signal 9; restarting it" "$agent_err" \
  || fail "the agent did not restart its worker: $(cat "$agent_err")"
grep -Eq "herd agent: (every worker has ended|the master closed its cluster); exiting" "$agent_err" \
  || fail "the agent's end: $(cat "$agent_err")"

echo "cli: ok"
