#!/bin/sh
# Stop window of `argstash inject --python` on a CPython 3.11 process 41 Python
# frames deep with a second, busy thread (issue 22, "Also found"): ROUNDS fresh
# processes, one inject each; prints each "target stopped for N us" and the
# median, p90 and max, with the load average before and after (the stop is
# dominated by how soon the busy thread gets a CPU to enter its stop).
#
#   scripts/bench-python-inject.sh [ROUNDS]     (default 20)
#   ARGSTASH=path/to/argstash  PYTHON=python3.11-with-ctypes
#
# Needs a release build (cargo build --release -p argstash) and CPython 3.11.
set -eu
ROUNDS=${1:-20}
HERE=$(cd "$(dirname "$0")/.." && pwd)
ARGSTASH=${ARGSTASH:-$HERE/target/release/argstash}
PYTHON=${PYTHON:-python3}
[ -x "$ARGSTASH" ] || { echo "no $ARGSTASH: cargo build --release -p argstash" >&2; exit 1; }
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' || {
    echo "$PYTHON is not CPython 3.11: give PYTHON=..." >&2; exit 1; }
DIR=$(mktemp -d /tmp/argstash-bench-pyinject.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/deep.py" <<'PY'
import os, sys, threading
def busy():
    x = 0
    while True:
        x += 1
threading.Thread(target=busy, daemon=True).start()
def rec(n):
    if n == 0:
        print("ready", os.getpid(), flush=True)
        sys.stdin.readline()
        return
    rec(n - 1)
rec(40)  # with the module frame: 41 Python frames
PY
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
: > "$DIR/stops"
while [ "$i" -lt "$ROUNDS" ]; do
    i=$((i + 1))
    mkfifo "$DIR/in"
    "$PYTHON" "$DIR/deep.py" < "$DIR/in" > "$DIR/out" &
    PY_PID=$!
    exec 3> "$DIR/in"
    n=0
    until grep -q '^ready' "$DIR/out" 2>/dev/null; do
        n=$((n + 1)); [ "$n" -lt 200 ] || { echo "no ready line" >&2; exit 1; }; sleep 0.05
    done
    sleep 0.2   # the busy thread is running
    "$ARGSTASH" inject --pid "$PY_PID" --python > "$DIR/inject" 2>&1 || { cat "$DIR/inject" >&2; exit 1; }
    us=$(sed -n 's/^target stopped for \([0-9]*\) us.*/\1/p' "$DIR/inject")
    echo "round $i: stopped $us us"
    echo "$us" >> "$DIR/stops"
    exec 3>&-
    kill "$PY_PID" 2>/dev/null || true
    wait "$PY_PID" 2>/dev/null || true
    rm -f "$DIR/in"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
sort -n "$DIR/stops" | awk '{ v[NR] = $1 } END {
    m = v[int((NR + 1) / 2)]; p = v[int(NR * 0.9 + 0.999)]; if (p == "") p = v[NR]
    printf "n=%d  min %d us  median %d us  p90 %d us  max %d us\n", NR, v[1], m, p, v[NR] }'
