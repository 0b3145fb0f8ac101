#!/usr/bin/env bash
# Runs the siginfo tests (ptrace::session, ptrace::requeue) N times (default 30),
# four test threads at once so that sessions of one test trace while another test
# floods its own target with real-time signals: the conditions under which a
# queued signal once lost its siginfo 2-3 times in 30 runs. Prints the pass count.
set -uo pipefail
cd "$(dirname "$0")/.."
export XDG_CACHE_HOME="$PWD/target/xdg-cache"
runs=${1:-30}
cargo test -q -p injector --lib --no-run 2>/dev/null
log=$(mktemp)
pass=0
for i in $(seq 1 "$runs"); do
    if cargo test -q -p injector --lib -- --test-threads=4 \
        ptrace::session::tests::signal ptrace::session::tests::siginfo \
        ptrace::session::tests::queued ptrace::requeue >"$log" 2>&1; then
        pass=$((pass + 1))
    else
        echo "run $i failed:"; grep -E "panicked|left|right" "$log" | head -5
    fi
done
rm -f "$log"
echo "signal soak: $pass of $runs runs passed"
[[ $pass == "$runs" ]]
