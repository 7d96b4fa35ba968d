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
