#!/usr/bin/env bash
# The examples a user copies: the starter project and the example
# programs, each run on a small input on two local workers, its output
# checked. Run from the project's root after `cabal build all` (make test
# does both). Needs no root and starts nothing but the programs' own
# workers.
set -euo pipefail
CABAL=${CABAL:-cabal}
bin() { "$CABAL" list-bin --offline "exe:$1"; }
fail() { echo "examples: $*" >&2; exit 1; }

# the starter's own cabal.project finds herd where it says (../..)
plan=$(mktemp -d)
trap 'rm -rf "$plan"' EXIT
(cd examples/starter && "$CABAL" build --offline --dry-run --builddir="$plan" exe:my-herd-program >/dev/null 2>"$plan/err") \
  || fail "examples/starter/cabal.project does not resolve: $(tail -3 "$plan/err")"

out=$("$(bin my-herd-program)" --workers 2 --below 10000)
[[ "$out" == "below 10000, 6171 takes the most steps: 261" ]] || fail "starter printed: $out"

# a whole host joins the starter's master by hand: the same executable as
# an agent, which starts two workers and exits once they have ended
port=$(( 40000 + RANDOM % 20000 ))
export HERD_SECRET="examples-test-secret-$RANDOM-0123456789"
"$(bin my-herd-program)" --listen "127.0.0.1:$port" --wait-workers 2 --below 10000 >"$plan/out" 2>"$plan/err" &
master=$!
# the agent joins once the master listens (a busy machine takes a while)
for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
HERD_AGENT=2 HERD_WORKER="127.0.0.1:$port" timeout 60 "$(bin my-herd-program)" 2>"$plan/agent" \
  || fail "the agent failed: $(cat "$plan/agent")"
wait "$master" || fail "the starter's master failed: $(cat "$plan/err")"
[[ "$(cat "$plan/out")" == "below 10000, 6171 takes the most steps: 261" ]] || fail "with an agent the starter printed: $(cat "$plan/out")"
grep -q "herd agent: started 2 workers" "$plan/agent" || fail "the agent's log: $(cat "$plan/agent")"
unset HERD_SECRET

out=$("$(bin herd-example-pi)" --workers 2 --samples 1000000)
pi=$(sed -n 's/^pi is about \([0-9.]*\) (1000000 samples in 10 tasks)$/\1/p' <<<"$out")
[[ -n "$pi" ]] || fail "pi printed: $out"
awk -v p="$pi" 'BEGIN { exit !(p > 3.10 && p < 3.18) }' || fail "pi is not near 3.14: $pi"

out=$("$(bin herd-example-sweep)" --workers 2 --starts 100)
grep -qx "76 of 101 starts converged, to -1.769292" <<<"$out" || fail "sweep printed: $out"
grep -qx "25 did not:" <<<"$out" || fail "sweep printed: $out"
grep -q "^  from 0.0000: herd: task 0 (the 1st input) of newton .* failed: no root within 50 steps from 0.0$" <<<"$out" \
  || fail "sweep did not name the start that cycles: $out"

# checked against the same PageRank written plainly (5000 nodes, 5 steps)
out=$("$(bin herd-example-ranks)" --workers 2 --nodes 5000 --iterations 5)
[[ "$out" == "2595:1.741 870:1.711 2889:1.697" ]] || fail "ranks printed: $out"

out=$("$(bin herd-example-queens)" --workers 2 --size 10)
[[ "$out" == "724 solutions of 10 queens" ]] || fail "queens printed: $out"

# one task, its children stolen by the other worker
out=$("$(bin herd-example-fib)" --workers 2 --n 30)
[[ "$out" == "nfib 30 makes 2692537 calls" ]] || fail "fib printed: $out"

out=$("$(bin herd-example-pipeline)" --workers 2 --upto 10000)
[[ "$out" == "the sum of the squares from 1 to 10000 is 333383335000" ]] || fail "pipeline printed: $out"

out=$("$(bin herd-example-particles)" --workers 2 --particles 1000 --steps 20)
last=$(tail -1 <<<"$out")
read -r est truth < <(sed -n 's/^step 20: seen *[-0-9.]*, estimated *\([-0-9.]*\), truly *\([-0-9.]*\)$/\1 \2/p' <<<"$last")
[[ -n "${est:-}" ]] || fail "particles printed: $out"
awk -v e="$est" -v t="$truth" 'BEGIN { d = e - t; if (d < 0) d = -d; exit !(d < 1.0) }' \
  || fail "the filter lost the object: estimated $est, truly $truth"

# word counts: stop words shared, counts summed on the workers
for _ in $(seq 300); do echo "The cat sat on the mat."; done >"$plan/text"
for _ in $(seq 100); do echo "A dog, and a Cat!"; done >>"$plan/text"
out=$("$(bin herd-example-words)" --workers 2 --top 4 "$plan/text")
[[ "$out" == "$(printf '1100 words, 4 different\n    400 cat\n    300 mat\n    300 sat\n    100 dog')" ]] \
  || fail "words printed: $out"

# a bad flag is refused with the program's own usage
if err=$("$(bin herd-example-pi)" --samples ten 2>&1); then fail "pi accepted --samples ten"; fi
grep -q "expected a whole number of samples" <<<"$err" || fail "pi's refusal: $err"
grep -q "Usage: herd-example-pi" <<<"$err" || fail "pi's refusal shows no usage: $err"

echo "examples: ok (starter, starter with an agent, pi, sweep, ranks, queens, fib, pipeline, particles, words)"
