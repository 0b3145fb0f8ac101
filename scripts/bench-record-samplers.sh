#!/bin/sh
# `argstash record`'s two samplers next to `perf record`, one run each, on the
# ground-truth fixture (tests/fixtures/profsplit.c measures its own hot_a/hot_b
# split with its threads' CPU clocks). Figures in docs/BENCHMARKS.md.
#
#   scripts/bench-record-samplers.sh            # 8 busy threads, 499 Hz, 3 s
#   THREADS=1 RATE=999 scripts/bench-record-samplers.sh
#
# ARGSTASH (default target/release/argstash) is the binary measured.
set -eu
ARGSTASH=${ARGSTASH:-target/release/argstash}
RATE=${RATE:-499}
SECS=${SECS:-3}
THREADS=${THREADS:-8}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O2 -g -pthread -o "$dir/profsplit" tests/fixtures/profsplit.c

# hot_a's share of hot_a + hot_b in the fixture's own output, and the samples
# its CPU time in them is worth at RATE.
truth() {
    sed -n 's/^split hot_a=\([0-9]*\) hot_b=\([0-9]*\)$/\1 \2/p' "$1" |
        awk -v r="$RATE" '{ printf "%.1f%%, %.2f CPU-s = %d samples at %d Hz",
            100 * $1 / ($1 + $2), ($1 + $2) / 1e9, ($1 + $2) * r / 1e9, r }'
}

echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); profsplit split $SECS $THREADS at $RATE Hz"
for s in kernel ptrace; do
    "$ARGSTASH" record --sampler "$s" --rate "$RATE" -o "$dir/$s.txt" \
        -- "$dir/profsplit" split "$SECS" "$THREADS" >"$dir/$s.out" 2>"$dir/$s.err"
    got=$(awk '/hot_a/ { a += $NF } /hot_b/ { b += $NF }
        END { printf "%.1f%% of %d samples", 100 * a / (a + b), a + b }' "$dir/$s.txt")
    echo "argstash --sampler $s: hot_a $got (fixture: $(truth "$dir/$s.out"))"
    grep '^argstash record:' "$dir/$s.err" | sed 's/^/    /'
done
perf record -q -e cpu-clock -F "$RATE" -g -o "$dir/perf.data" \
    -- "$dir/profsplit" split "$SECS" "$THREADS" >"$dir/perf.out" 2>"$dir/perf.err"
perf report -i "$dir/perf.data" --stdio --no-children --sort sym -g none -n -q 2>/dev/null |
    awk '$NF == "hot_a" { a = $2 } $NF == "hot_b" { b = $2 }
        END { printf "perf record -e cpu-clock -F '"$RATE"' -g: hot_a %.1f%% of %d samples", 100 * a / (a + b), a + b }'
echo " (fixture: $(truth "$dir/perf.out"))"
