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

# a worker that cannot reach its master logs one stamped line and exits
if err=$(timeout 20 "$H" worker --connect 127.0.0.1:1 2>&1); then fail "a worker with no master exited 0"; fi
grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{2}:[0-9]{2} herd worker: ' <<<"$err" \
  || fail "the worker's log line has no ISO 8601 time: $err"

echo "cli: ok"
