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

# munge: a fresh key, a socket in a world-executable directory
mkdir -m 755 "$WORK/munge"
head -c 1024 /dev/urandom > "$WORK/munge.key"; chmod 400 "$WORK/munge.key"
munged -F -S "$WORK/munge/munge.sock" --key-file="$WORK/munge.key" --pid-file="$WORK/munged.pid" \
  --seed-file="$WORK/munge.seed" --log-file="$WORK/munged.log" 2>"$WORK/munged.err" &
MUNGED=$!
cleanup "kill $MUNGED; wait $MUNGED"
for i in $(seq 100); do [ -S "$WORK/munge/munge.sock" ] && break; sleep 0.05; done
[ -S "$WORK/munge/munge.sock" ] || fail "munged did not start: $(cat "$WORK/munged.log" 2>/dev/null)"

host=$(hostname -s)
mkdir -p "$WORK/state" "$WORK/spool"
CTLD_PORT=$(free_port); SLURMD_PORT=$(free_port)
cat > "$WORK/slurm.conf" <<CONF
ClusterName=herdtest
SlurmctldHost=$host
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$WORK/slurm.conf"
slurmctld -D >"$WORK/slurmctld.out" 2>&1 &
CTLD=$!
cleanup "kill $CTLD; wait $CTLD"
slurmd -D >"$WORK/slurmd.out" 2>&1 &
SLURMD=$!
cleanup "kill $SLURMD; wait $SLURMD"
for i in $(seq 600); do [ "$(sinfo -h -o %T 2>/dev/null)" = "idle" ] && break; sleep 0.05; done
[ "$(sinfo -h -o %T 2>/dev/null)" = "idle" ] || fail "SLURM did not come up: $(tail -5 "$WORK/slurmctld.log" "$WORK/slurmd.log" 2>/dev/null)"
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
