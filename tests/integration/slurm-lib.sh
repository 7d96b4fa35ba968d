# Start a real single-node SLURM for a test (sourced after lib.sh, as
# root): munged with a fresh key, then slurmctld and slurmd on free ports,
# configured in $WORK, all stopped when the test exits. $1: the CPUs the
# node offers (more than it has: slurmd is told to trust the config), so
# that that many one-CPU jobs run at once. Sets SLURM_CONF.
start_slurm() {
  local cpus=$1
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
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus State=UNKNOWN
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
}
