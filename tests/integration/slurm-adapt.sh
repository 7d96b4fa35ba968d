#!/usr/bin/env bash
# Adaptive scaling under a real SLURM (Debian's slurm-wlm with munge,
# one node offering 4 CPUs, started by the test): a master outside any
# allocation submits its own jobs (--slurm-adapt), each a host agent that
# connects back. Checks, each with exact results:
# - a serial phase, 2,000 tasks, a serial phase: the master's jobs in
#   squeue rise to MAX during the farm and fall to MIN in the serial phases;
# - jobs reaching their walltime mid-farm retire and are replaced (log);
# - a job cancelled with scancel mid-farm is named in the log, its tasks
#   run elsewhere;
# - a refused submission is a clear log line and the job ends on the
#   workers it has.
source "$(dirname "$0")/lib.sh"
need_root
unset SLURM_JOB_ID SLURM_NTASKS SLURM_NPROCS
source "$(dirname "$0")/slurm-lib.sh"
start_slurm 4
make_secret
export HOME="$WORK/home"; mkdir -p "$HOME"

# Run herd demo on adaptive jobs in the background ($1: a name for its
# files; the rest: demo flags); sets PID. Each job's agent is this binary.
run_demo() {
  local name=$1; shift
  "$HERD_BIN" demo --secret-file "$WORK/secret" --start-timeout 60 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID=$!
  cleanup "kill $PID"
}

# The master's jobs in the queue now (pending or running).
queued() { squeue -h -o "%i %T" -n "herd-adapt-$1" 2>/dev/null | grep -cE 'PENDING|RUNNING|CONFIGURING' || true; }

# Wait for the master to end; its exit status in rc.
finish() { rc=0; wait "$1" || rc=$?; }

log "grow to MAX during a 2000-task farm, fall to MIN in the serial phases"
run_demo grow --fib 31 --tasks 2000 --serial 14 --slurm-adapt 1..3 --adapt-wait 1 --adapt-idle 3
: > "$WORK/samples"
while kill -0 "$PID" 2>/dev/null; do
  # phase: serial-phase lines so far (1: the first serial phase, 2: the
  # farm, 3: the last serial phase, 4: the end)
  echo "$(queued "$PID") $(grep -c 'serial phase' "$WORK/grow.err" 2>/dev/null || true)" >> "$WORK/samples"
  sleep 0.5
done
finish "$PID"
[ "$rc" = 0 ] || { cat "$WORK/grow.err"; fail "the adaptive run failed (exit $rc)"; }
grep -q "complete and correct" "$WORK/grow.out" || fail "results incomplete: $(cat "$WORK/grow.out")"
# columns: jobs queued, phase
most() { awk -v p="$1" '$2 == p { print $1 }' "$WORK/samples" | sort -n | tail -1; }
before=$(most 1); during=$(most 2)
late=$(awk '$2 == 3 { print $1 }' "$WORK/samples" | tail -2 | sort -n | tail -1)
adaptive_log() { grep adaptive "$WORK/grow.err" | tail -20; }
[ "${before:-9}" = 1 ] || fail "the first serial phase held ${before:-no} jobs, not 1: $(adaptive_log)"
[ "${during:-0}" = 3 ] || fail "the jobs did not rise to 3 during the farm (at most ${during:-0}): $(adaptive_log)"
[ "${late:-9}" = 1 ] || fail "the jobs did not fall to 1 in the last serial phase (${late:-none} at its end): $(adaptive_log)"
grep -q "adaptive: cancelling job" "$WORK/grow.err" || fail "no cancellation was logged"

log "jobs reaching their walltime mid-farm retire and are replaced"
# a 1-minute walltime retiring 54 s early: each job works for about 6 s, and
# the farm lasts several of those (2000 tasks ended before the first
# retirement on a faster machine)
run_demo wall --fib 31 --tasks 5000 --slurm-adapt 2..2 --slurm-time 1 --slurm-lead 54
finish "$PID"
[ "$rc" = 0 ] || { cat "$WORK/wall.err"; fail "the walltime run failed (exit $rc)"; }
grep -q "complete and correct" "$WORK/wall.out" || fail "results incomplete across walltimes: $(cat "$WORK/wall.out")"
grep -q "retires: its walltime ends in" "$WORK/wall.err" || fail "no job retired for its walltime: $(grep adaptive "$WORK/wall.err")"
retired=$(grep -c "retires: its walltime" "$WORK/wall.err")
asked=$(grep -c "asking for .* more job" "$WORK/wall.err")
[ "$asked" -gt 1 ] || fail "no replacement was asked for after $retired retirements: $(grep adaptive "$WORK/wall.err")"

log "a job cancelled by scancel mid-farm"
run_demo cancel --fib 31 --tasks 2000 --slurm-adapt 2..2
for i in $(seq 600); do [ "$(grep -c 'joined with' "$WORK/cancel.err" 2>/dev/null || true)" -ge 2 ] && break; sleep 0.1; done
sleep 2
victim=$(squeue -h -o "%i %T" -n "herd-adapt-$PID" | awk '$2 == "RUNNING" { print $1; exit }')
[ -n "$victim" ] || fail "no running job to cancel: $(grep adaptive "$WORK/cancel.err")"
scancel "$victim"
finish "$PID"
[ "$rc" = 0 ] || { cat "$WORK/cancel.err"; fail "the run with a cancelled job failed (exit $rc)"; }
grep -q "complete and correct" "$WORK/cancel.out" || fail "results incomplete after scancel: $(cat "$WORK/cancel.out")"
grep -q "job $victim ended while it was working" "$WORK/cancel.err" \
  || fail "the cancelled job $victim is not named in the log: $(grep adaptive "$WORK/cancel.err")"

log "a refused submission: a clear line, and the farm ends on the local worker"
run_demo refused --fib 27 --tasks 300 --workers 1 --slurm-adapt 1..2 --slurm-partition nosuchpartition
finish "$PID"
[ "$rc" = 0 ] || { cat "$WORK/refused.err"; fail "the run with refused submissions failed (exit $rc)"; }
grep -q "complete and correct" "$WORK/refused.out" || fail "results incomplete with refused jobs: $(cat "$WORK/refused.out")"
grep -q "SLURM refused a job: sbatch exited with code 1: .*nosuchpartition\|SLURM refused a job: sbatch exited with code 1: .*[Pp]artition" "$WORK/refused.err" \
  || fail "no clear line for the refused submission: $(grep adaptive "$WORK/refused.err")"
