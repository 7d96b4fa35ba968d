#!/usr/bin/env bash
# herd under SLURM: a real single-node cluster (Debian's slurm-wlm with
# munge) configured on this host by the test. Checks that a master inside
# salloc and inside an sbatch job starts, through one agent per node that
# srun starts, one worker per allocated task, carried on one host link,
# and returns complete results, and that --slurm outside an allocation is
# a clear error.
source "$(dirname "$0")/lib.sh"
need_root
unset SLURM_JOB_ID SLURM_NTASKS SLURM_NPROCS

source "$(dirname "$0")/slurm-lib.sh"
start_slurm "$(nproc)"
make_secret
tasks=$(nproc)

log "salloc -n $tasks: one worker per task through srun"
timeout 120 salloc -Q -n "$tasks" "$HERD_BIN" demo --fib 25 --tasks 60 --slurm --secret-file "$WORK/secret" \
  --start-timeout 30 >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/err"; fail "the run under salloc failed"; }
grep -q "complete and correct" "$WORK/out" || fail "results incomplete under salloc: $(cat "$WORK/out")"
grep -q "starting with $tasks workers" "$WORK/err" || fail "expected $tasks workers: $(cat "$WORK/err")"
# one agent on the node started them, and carried them on one link
grep -q "herd agent: this host's workers are carried on one link" "$WORK/err" \
  || fail "no agent carried the workers: $(cat "$WORK/err")"

log "an sbatch job running the master"
cat > "$WORK/job.sh" <<JOB
#!/bin/sh
#SBATCH --ntasks=$tasks
#SBATCH --output=$WORK/job.out
exec "$HERD_BIN" demo --fib 25 --tasks 60 --slurm --secret-file "$WORK/secret"
JOB
timeout 120 sbatch -Q --wait "$WORK/job.sh" || { cat "$WORK/job.out"; fail "the sbatch job failed"; }
grep -q "complete and correct" "$WORK/job.out" || fail "results incomplete under sbatch: $(cat "$WORK/job.out")"

log "--slurm outside an allocation names the problem"
if "$HERD_BIN" demo --slurm --secret-file "$WORK/secret" >"$WORK/out" 2>"$WORK/err"; then
  fail "--slurm outside an allocation succeeded"
fi
grep -q "not inside a SLURM allocation" "$WORK/err" || fail "unclear error: $(cat "$WORK/err")"
