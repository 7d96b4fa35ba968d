# Shared helpers of herd's integration tests (sourced, not run).
# Each test starts the real components it needs, as root, and removes
# everything it started when it exits, whatever way it exits.
set -euo pipefail

HERD_BIN="${HERD_BIN:?set HERD_BIN to the herd executable}"
TEST_NAME="$(basename "$0" .sh)"
WORK="$(mktemp -d "/tmp/herd-${TEST_NAME}.XXXXXX")"
chmod 755 "$WORK"
CLEANUPS=()

on_exit() {
  local rc=$?
  local i
  for (( i=${#CLEANUPS[@]}-1; i>=0; i-- )); do eval "${CLEANUPS[$i]}" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
  if [ $rc -eq 0 ]; then echo "ok   $TEST_NAME"; else echo "FAIL $TEST_NAME (exit $rc)"; fi
}
trap on_exit EXIT

cleanup() { CLEANUPS+=("$1"); }
log() { echo "     $TEST_NAME: $*"; }
fail() { echo "     $TEST_NAME: FAILED: $*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" -eq 0 ] || fail "needs root (to start daemons and network namespaces)"
}

# A free TCP port on loopback: one that refuses connections now.
free_port() {
  local port i
  for (( i=0; i<100; i++ )); do
    port=$(( 20000 + RANDOM % 40000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return 0; fi
  done
  fail "no free port found"
}

# Wait until a TCP port on loopback accepts connections (up to $2 seconds).
wait_port() {
  local port=$1 secs=${2:-10} i
  for (( i=0; i<secs*20; i++ )); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  return 1
}

# Processes still running our herd binary (excluding this shell's children that are gone).
herd_processes() {
  pgrep -f -- "$HERD_BIN" || true
}

# A secret file for the run.
make_secret() {
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/secret"
  chmod 600 "$WORK/secret"
}

# Keys for an sshd the test starts ($WORK/host_key, $WORK/user_key) and
# root login by key; SSH_OPTIONS holds the client options that use them.
make_ssh_keys() {
  mkdir -p /run/sshd
  ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$WORK/user_key"
  cp "$WORK/user_key.pub" "$WORK/authorized_keys"
  # A root account whose password field is '!' is "locked" and refused even with a key.
  if [ "$(getent shadow root | cut -d: -f2)" = "!" ]; then usermod -p '*' root; fi
  SSH_OPTIONS="-i $WORK/user_key -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
}

# Write to $1 the config of an sshd listening at address $2 with the
# test's keys (its pid file is $1.pid).
write_sshd_config() {
  cat > "$1" <<CONF
ListenAddress $2
HostKey $WORK/host_key
PidFile $1.pid
AuthorizedKeysFile $WORK/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
CONF
}

# Three network namespaces joined by veth pairs, removed when the test
# exits: the master's, $M (10.$1.1.1 and 10.$1.2.1), and two hosts', $A
# (10.$1.1.2) and $B (10.$1.2.2), each routing to the master. $1 picks the
# subnet, so that tests do not share addresses.
make_two_hosts() {
  local net=$1 tag=$$ ns
  M=herd-m$net-$tag; A=herd-a$net-$tag; B=herd-b$net-$tag
  for ns in $M $A $B; do
    ip netns add $ns
    cleanup "ip netns del $ns"
    ip -n $ns link set lo up
  done
  ip link add va-$tag netns $M type veth peer name veth0 netns $A
  ip link add vb-$tag netns $M type veth peer name veth0 netns $B
  ip -n $M addr add 10.$net.1.1/24 dev va-$tag
  ip -n $A addr add 10.$net.1.2/24 dev veth0
  ip -n $M addr add 10.$net.2.1/24 dev vb-$tag
  ip -n $B addr add 10.$net.2.2/24 dev veth0
  ip -n $M link set va-$tag up; ip -n $M link set vb-$tag up
  ip -n $A link set veth0 up; ip -n $B link set veth0 up
  ip -n $A route add default via 10.$net.1.1
  ip -n $B route add default via 10.$net.2.1
}
