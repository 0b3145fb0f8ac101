#!/usr/bin/env bash
# The long version of tests/tests/e2e/busy_targets.rs (issue 9): inject+eject
# rounds of a never-called function on the four busy fixtures (malloc loop,
# dlopen loop, printf loop, C++ exceptions), across fresh processes.
#
#   scripts/stress-rounds.sh [ROUNDS_PER_FIXTURE]   (default 1000; or $ARGSTASH_ROUNDS)
#
# ARGSTASH_SEED repeats a run. Prints each fixture's summary, then one line:
#   N rounds, M crashes, K mismatches, H hangs, F failed argstash runs, elapsed S s
# Exits non-zero if anything failed. The fixtures' tests run one at a time
# (--test-threads=1) so the figure does not depend on the other tests' load.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-${ARGSTASH_ROUNDS:-1000}}"
log="$(mktemp -t stress-rounds.XXXXXX)"
start=$(date +%s)
ARGSTASH_ROUNDS="$rounds" cargo test -p argstash-tests --test e2e -- busy_targets:: \
    --nocapture --test-threads=1 >"$log" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
grep -E '^busy-summary ' "$log" || true
if [ "$status" -ne 0 ]; then
    echo "--- failures (full log: $log):"
    grep -E -A12 '^(CRASH|HANG|MISMATCH|argstash )|panicked at' "$log" | head -200
fi
awk -v elapsed="$elapsed" '
    /^busy-summary / {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] }
    }
    END {
        printf "%d rounds, %d crashes, %d mismatches, %d hangs, %d failed argstash runs, elapsed %d s\n",
            v["rounds"], v["crashes"], v["mismatches"], v["hangs"], v["argstash_failures"], elapsed
    }' "$log"
[ "$status" -eq 0 ] && rm -f "$log"
exit "$status"
