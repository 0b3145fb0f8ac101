#!/bin/bash
# `argstash record`'s two samplers next to `perf record` (and py-spy on a
# Python spinner), one run of everything, short runs; figures in
# docs/BENCHMARKS.md (issue 23). Each line starts with the load average at
# that moment: the machine is shared, so compare within one run.
#
#   scripts/bench-record-samplers.sh                 # all parts
#   PARTS=accuracy scripts/bench-record-samplers.sh  # accuracy | cost | python
#                                        # | args | slowdown99 | pysplit
#   THREADS_LIST="1 8" RATE=999 SECS=2 scripts/bench-record-samplers.sh
#
# Parts:
# - accuracy: `profsplit split SECS T` (tests/fixtures/profsplit.c measures
#   its own hot_a/hot_b split with its threads' CPU clocks) for each T of
#   THREADS_LIST (default 1 8 64) under `argstash record --pid` with
#   `--sampler kernel` and `--sampler ptrace`, and under
#   `perf record -e cpu-clock -F RATE -g`: hot_a's share of hot_a+hot_b
#   against the fixture's; for argstash its own CPU (user+sys, /usr/bin/time;
#   with --pid the target is no child of argstash, so none of its CPU is
#   counted; loading the target's symbols is included) per sample kept, and
#   the samples lost and why (the summary's words).
# - cost: `profsplit spin SECS 1` (work units a second) alone, under
#   `argstash record --sampler kernel` and under `perf record -g`, at 99 and
#   999 Hz, REPS interleaved rounds (default 2), best of each: slowdown
#   against the best run alone.
# - python: the same on a pure-Python spinner (iterations a second) with
#   `argstash record --sampler ptrace`, `--sampler kernel` (the default) and
#   `py-spy record`.
# - args: `profsplit accounts SECS` (apply_entry(account, amount), the
#   fixture measures each account's CPU time: 10/20/70%) under `argstash
#   record --func apply_entry --args account` with each sampler, and under
#   perf (which has no arguments: apply_entry's share only), REPS rounds.
# - slowdown99: `profsplit spin SECS 1` alone, under `argstash record`
#   (kernel) and under `perf record -g`, at 99 Hz, REPS rounds (default 11),
#   the three runs of a round back to back in a rotating order: each
#   profiled run's work units against the unprofiled run of its round, the
#   median and the spread (lowest, highest) of those ratios, and the load.
# - pysplit: `tests/fixtures/python/profsplit.py` (py_loop in Python, c_work
#   in C; the fixture measures both with its thread's CPU clock) under the
#   host's python3 and, when present, the sid root's python3.14
#   (scripts/sid-root.sh), REPS rounds of: `argstash record` (default: the
#   kernel sampler, `[py~]` frames), `--sampler ptrace` (`[py]`), and
#   `py-spy record`; py_loop's share of py_loop + c_work against the
#   fixture's, the share of kernel samples whose Python frames were kept,
#   and each profiler's CPU as a share of the target's.
#
# ARGSTASH (default target/release/argstash) is the binary measured.
set -eu
ARGSTASH=${ARGSTASH:-target/release/argstash}
RATE=${RATE:-499}
SECS=${SECS:-3}
THREADS_LIST=${THREADS_LIST:-1 8 64}
PARTS=${PARTS:-accuracy cost python args slowdown99 pysplit}
PYRATE=${PYRATE:-99}
SID_ROOT=${SID_ROOT:-/var/cache/argstash-sid/root}
REPS=${REPS:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O2 -g -pthread -o "$dir/profsplit" tests/fixtures/profsplit.c

load() { cut -d' ' -f1 /proc/loadavg; }

# hot_a's share of hot_a + hot_b in the fixture's own output.
truth() {
    sed -n 's/^split hot_a=\([0-9]*\) hot_b=\([0-9]*\)$/\1 \2/p' "$1" |
        awk '{ printf "%.1f%%", 100 * $1 / ($1 + $2) }'
}

# hot_a's share in collapsed stacks, and the samples in hot_a + hot_b.
share() {
    awk '/hot_a/ { a += $NF } /hot_b/ { b += $NF }
        END { if (a + b) printf "%.1f%% of %d samples", 100 * a / (a + b), a + b; else printf "no samples" }' "$1"
}

# One summary's samples, lost samples and why, and argstash's CPU per sample.
costs() { # summary-file time-file
    awk -v t="$(cat "$2")" '
        /^argstash record:/ {
            n = $3
            lost = "none lost"
            if (match($0, /[0-9]+ samples lost \([^)]*\)/)) lost = substr($0, RSTART, RLENGTH)
            split(t, u, " ")
            printf "argstash CPU %.2f s = %.0f us per sample; %s", u[1] + u[2],
                n ? 1e6 * (u[1] + u[2]) / n : 0, lost
        }
        /throttled/ { sub(/^argstash: note: /, ""); printf "; %s", $0 }' "$1"
}

echo "$(nproc) CPUs; $(uname -r); kernel.perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid); $ARGSTASH"

if [[ " $PARTS " == *" accuracy "* ]]; then
    echo "== accuracy: profsplit split $SECS T at $RATE Hz (fixture's own hot_a share in brackets)"
    for t in $THREADS_LIST; do
        for s in kernel ptrace; do
            l=$(load)
            # The target runs a little longer than the recording: the share
            # it measures is the same throughout.
            "$dir/profsplit" split "$(awk -v s="$SECS" 'BEGIN { print s + 0.5 }')" "$t" >"$dir/$s.out" &
            target=$!
            sleep 0.2
            /usr/bin/time -f '%U %S' -o "$dir/$s.time" "$ARGSTASH" record --pid "$target" \
                --sampler "$s" --rate "$RATE" --duration "$SECS" -o "$dir/$s.txt" 2>"$dir/$s.err"
            wait "$target"
            echo "load $l | T=$t argstash --sampler $s: hot_a $(share "$dir/$s.txt") ($(truth "$dir/$s.out")); $(costs "$dir/$s.err" "$dir/$s.time")"
        done
        l=$(load)
        perf record -q -e cpu-clock -F "$RATE" -g -o "$dir/perf.data" \
            -- "$dir/profsplit" split "$SECS" "$t" >"$dir/perf.out" 2>"$dir/perf.err"
        perf report -i "$dir/perf.data" --stdio --no-children --sort sym -g none -n -q 2>/dev/null |
            awk '$NF == "hot_a" { a = $2 } $NF == "hot_b" { b = $2 }
                END { printf "hot_a %.1f%% of %d samples", 100 * a / (a + b), a + b }' >"$dir/perf.share"
        lost=$(perf report -i "$dir/perf.data" --stats 2>/dev/null | awk '/LOST/ { print $2 }' | head -1)
        echo "load $l | T=$t perf record -e cpu-clock -F $RATE -g: $(cat "$dir/perf.share") ($(truth "$dir/perf.out")); lost ${lost:-0}"
    done
fi

# Work units a run printed ("spin units=N").
units() { sed -n 's/^spin units=\([0-9]*\).*/\1/p' "$1"; }
# user+sys seconds in a /usr/bin/time file.
cpu() { awk '{ print $1 + $2 }' "$1"; }

# One run of the spinner $@ under profiler $prof at $hz: the target's units
# and CPU seconds, and the profiler's own CPU (argstash and py-spy attach with
# --pid, so their CPU is theirs alone; perf's is not measured).
# Prints "units target-cpu profiler-cpu".
spin_run() { # prof cmd...
    local prof=$1 out="$dir/run.out" pid w
    shift
    : >"$out"
    echo 0 0 >"$dir/prof.time"
    if [ "$prof" = perf ]; then
        perf record -q -e cpu-clock -F "$hz" -g -o "$dir/perf.data" \
            -- /usr/bin/time -f '%U %S' -o "$dir/target.time" "$@" >"$out" 2>/dev/null
    else
        /usr/bin/time -f '%U %S' -o "$dir/target.time" "$@" >"$out" &
        w=$!
        until grep -q '^ready' "$out"; do sleep 0.01; done
        pid=$(awk '/^ready/ { print $2 }' "$out")
        case $prof in
        alone) ;;
        py-spy) /usr/bin/time -f '%U %S' -o "$dir/prof.time" py-spy record -r "$hz" -f raw \
            -o "$dir/spy.txt" --pid "$pid" >/dev/null 2>&1 ;;
        *) # shellcheck disable=SC2086 # "--sampler kernel": two words
            /usr/bin/time -f '%U %S' -o "$dir/prof.time" "$ARGSTASH" record $prof --rate "$hz" \
            -o "$dir/a.txt" --pid "$pid" 2>"$dir/$hz.err" ;;
        esac
        wait "$w"
    fi
    echo "$(units "$out") $(cpu "$dir/target.time") $(cpu "$dir/prof.time")"
}

# Runs the spinner alone and under each profiler, REPS rounds interleaved,
# and prints for each profiler its best run's units (a wall-clock rate) and
# units per target CPU-second against the best run alone, and the
# profiler's CPU as a share of the target's.
compare() { # spinner-cmd... -- profilers...
    local cmd=() profs=() p r got tcpu pcpu
    while [ "$1" != -- ]; do cmd+=("$1"); shift; done
    shift
    profs=("$@")
    declare -A u c pc
    for r in $(seq "$REPS"); do
        for p in alone "${profs[@]}"; do
            read -r got tcpu pcpu < <(spin_run "$p" "${cmd[@]}")
            # The best run of each (least disturbed by the machine's other load).
            if [ "${got:-0}" -gt "${u[$p]:-0}" ]; then u[$p]=$got c[$p]=$tcpu pc[$p]=$pcpu; fi
        done
    done
    for p in alone "${profs[@]}"; do
        awk -v n="$p" -v u="${u[$p]}" -v c="${c[$p]}" -v pc="${pc[$p]}" \
            -v bu="${u[alone]}" -v bc="${c[alone]}" 'BEGIN {
            if (n == "alone") { printf "  alone: %d units, %.2f CPU-s\n", u, c; exit }
            printf "  %s: units %+.1f%%, units per target CPU-s %+.1f%%", n,
                100 * (u - bu) / bu, 100 * (u / c - bu / bc) / (bu / bc)
            if (pc > 0) printf ", profiler CPU %.1f%% of the target CPU", 100 * pc / c
            printf "\n" }'
    done
}

if [[ " $PARTS " == *" cost "* ]]; then
    for hz in 99 999; do
        echo "== cost at $hz Hz: profsplit spin $SECS 1, best of $REPS interleaved; load $(load)"
        compare "$dir/profsplit" spin "$SECS" 1 -- "--sampler kernel" perf
        grep '^argstash record:' "$dir/$hz.err" | sed 's/. Top self time.*//; s/^/    last argstash run: /'
        echo "  (load $(load) after)"
    done
fi

if [[ " $PARTS " == *" python "* ]]; then
    cat >"$dir/pyspin.py" <<'PY'
import os, sys, time
print("ready", os.getpid(), flush=True)
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    for i in range(1000):
        pass
    n += 1
print("spin units=%d" % n, flush=True)
PY
    for hz in 99 999; do
        echo "== python at $hz Hz: $(python3 --version) spinner (units of 1000 iterations), best of $REPS interleaved; load $(load)"
        echo "   (argstash's default on a Python target is the kernel sampler, Python frames read after each sample)"
        compare python3 "$dir/pyspin.py" "$SECS" -- "--sampler ptrace" "--sampler kernel" py-spy
        grep '^argstash record:' "$dir/$hz.err" | sed 's/. Top self time.*//; s/^/    last argstash run: /'
        echo "  (load $(load) after)"
    done
fi

if [[ " $PARTS " == *" args "* ]]; then
    echo "== args: profsplit accounts $SECS at $RATE Hz, $REPS rounds (fixture's own shares in brackets)"
    acct() { # collapsed-file: each account's share of the three
        awk '{ n = $NF; for (a = 1001; a <= 1003; a++) if (index($0, "apply_entry(account=" a ")")) c[a] += n }
            END { t = c[1001] + c[1002] + c[1003]; if (!t) { printf "no samples"; exit }
                printf "1001 %.1f%%, 1002 %.1f%%, 1003 %.1f%% of %d", 100 * c[1001] / t, 100 * c[1002] / t, 100 * c[1003] / t, t }' "$1"
    }
    acct_truth() {
        sed -n 's/^accounts 1001=\([0-9]*\) 1002=\([0-9]*\) 1003=\([0-9]*\)$/\1 \2 \3/p' "$1" |
            awk '{ t = $1 + $2 + $3; printf "%.1f%%, %.1f%%, %.1f%%", 100 * $1 / t, 100 * $2 / t, 100 * $3 / t }'
    }
    for r in $(seq "$REPS"); do
        for s in kernel ptrace; do
            l=$(load)
            "$ARGSTASH" record --sampler "$s" --rate "$RATE" --func apply_entry --args account \
                -o "$dir/acc.txt" -- "$dir/profsplit" accounts "$SECS" >"$dir/acc.out" 2>"$dir/acc.err"
            echo "load $l | round $r --sampler $s: $(acct "$dir/acc.txt") ($(acct_truth "$dir/acc.out"))"
        done
        l=$(load)
        perf record -q -e cpu-clock -F "$RATE" -g -o "$dir/perf.data" \
            -- "$dir/profsplit" accounts "$SECS" >"$dir/perf.out" 2>"$dir/perf.err"
        perf report -i "$dir/perf.data" --stdio --no-children --sort sym -g none -n -q 2>/dev/null |
            awk '$NF == "apply_entry" { a = $2 } { t += $2 } END { printf "apply_entry %d of %d samples, no arguments", a, t }' >"$dir/perf.share"
        echo "load $l | round $r perf record -g: $(cat "$dir/perf.share") ($(acct_truth "$dir/perf.out"))"
    done
fi

if [[ " $PARTS " == *" slowdown99 "* ]]; then
    SREPS=${SREPS:-11}
    echo "== slowdown at 99 Hz: profsplit spin $SECS 1, $SREPS rounds of alone / argstash (kernel) / perf, order rotated each round"
    hz=99
    : >"$dir/ratios"
    profs=(alone "--sampler kernel" perf)
    for r in $(seq "$SREPS"); do
        declare -A got=()
        l=$(load)
        for k in 0 1 2; do
            p=${profs[$(((k + r) % 3))]}
            read -r u _ _ < <(spin_run "$p" "$dir/profsplit" spin "$SECS" 1)
            got[$p]=$u
        done
        echo "  round $r (load $l): alone ${got[alone]}, kernel ${got[--sampler kernel]}, perf ${got[perf]}"
        awk -v a="${got[alone]}" -v k="${got[--sampler kernel]}" -v p="${got[perf]}" \
            'BEGIN { printf "%.3f %.3f\n", 100 * (k - a) / a, 100 * (p - a) / a }' >>"$dir/ratios"
    done
    for col in 1 2; do
        name=$([ $col = 1 ] && echo "argstash (kernel)" || echo "perf record -g")
        sort -g -k$col,$col "$dir/ratios" | awk -v c=$col -v n="$name" '{ v[NR] = $c }
            END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                printf "  %s: work units %+.2f%% median against the round'"'"'s unprofiled run, spread %+.2f%% .. %+.2f%% (%d rounds)\n", n, m, v[1], v[NR], NR }'
    done
    echo "  (load $(load) after)"
fi

if [[ " $PARTS " == *" pysplit "* ]]; then
    cc -O2 -g -shared -fPIC -o "$dir/libcwork.so" tests/fixtures/python/c_work.c
    cp tests/fixtures/python/profsplit.py "$dir/"
    # py_loop's share of py_loop + c_work in an argstash profile (TAG: [py~] or
    # [py]; only samples whose Python frames were kept count, on both sides).
    py_share() { # file tag
        awk -v tag="$2" '{ n = $NF; c = index($0, ";c_work "); p = index($0, tag " py_loop;") || index($0, tag " py_loop ")
                w = index($0, tag " py_work")
                if (c && w) cw += n; else if (p && !c) pl += n }
            END { if (pl + cw) printf "py_loop %.1f%% of %d", 100 * pl / (pl + cw), pl + cw; else printf "no samples" }' "$1"
    }
    # The same in py-spy's raw output (no native frames: c_work's time is
    # py_work's own, its innermost Python frame).
    spy_share() {
        awk '{ n = $NF; line = $0; sub(/ [0-9]+$/, "", line); k = split(line, f, ";"); leaf = f[k]
                if (leaf ~ /^py_loop /) pl += n; else if (leaf ~ /^py_work /) cw += n }
            END { if (pl + cw) printf "py_loop %.1f%% of %d", 100 * pl / (pl + cw), pl + cw; else printf "no samples" }' "$1"
    }
    py_truth() {
        sed -n 's/^pysplit py_self=\([0-9]*\) c=\([0-9]*\)$/\1 \2/p' "$1" | awk '{ printf "%.1f%%", 100 * $1 / ($1 + $2) }'
    }
    kept() {
        sed -n 's/.*: \([0-9]*\) samples had Python frames consistent.*, \([0-9]*\) had moved on.*/\1 \2/p' "$1" |
            awk '{ printf "; Python frames kept for %.1f%% of %d samples", 100 * $1 / ($1 + $2), $1 + $2 }'
    }
    pyruns=("host python3 ($(python3 --version 2>&1))|python3 $dir/profsplit.py $dir/libcwork.so")
    if [ -x "$SID_ROOT/usr/bin/python3.14" ]; then
        inside=/tmp/argstash-bench-py314-$$
        mkdir -p "$SID_ROOT$inside"
        cp tests/fixtures/python/profsplit.py tests/fixtures/python/c_work.c "$SID_ROOT$inside/"
        chroot "$SID_ROOT" gcc -O2 -g -shared -fPIC -o "$inside/libcwork.so" "$inside/c_work.c"
        trap 'rm -rf "$dir" "${SID_ROOT:?}$inside"' EXIT
        pyruns+=("sid python3.14|chroot $SID_ROOT /usr/bin/python3.14 $inside/profsplit.py $inside/libcwork.so")
    fi
    for entry in "${pyruns[@]}"; do
        label=${entry%%|*}
        read -r -a cmd <<<"${entry#*|}"
        echo "== pysplit on $label at $PYRATE Hz, $SECS s, $REPS rounds (fixture's own py_loop share in brackets)"
        for r in $(seq "$REPS"); do
            for p in default ptrace py-spy; do
                l=$(load)
                out="$dir/py.out"
                : >"$out"
                "${cmd[@]}" "$SECS" >"$out" &
                w=$!
                until grep -q '^ready' "$out"; do sleep 0.01; done
                pid=$(awk '/^ready/ { print $2 }' "$out")
                case $p in
                default) /usr/bin/time -f '%U %S' -o "$dir/prof.time" "$ARGSTASH" record --rate "$PYRATE" \
                    -o "$dir/py.txt" --pid "$pid" 2>"$dir/py.err" ;;
                ptrace) /usr/bin/time -f '%U %S' -o "$dir/prof.time" "$ARGSTASH" record --sampler ptrace \
                    --rate "$PYRATE" -o "$dir/py.txt" --pid "$pid" 2>"$dir/py.err" ;;
                py-spy) /usr/bin/time -f '%U %S' -o "$dir/prof.time" py-spy record -r "$PYRATE" -f raw \
                    -o "$dir/py.txt" --pid "$pid" >"$dir/py.err" 2>&1 ;;
                esac
                wait "$w"
                tcpu=$(sed -n 's/^pysplit py_self=\([0-9]*\) c=\([0-9]*\)$/\1 \2/p' "$out" | awk '{ print ($1 + $2) / 1e9 }')
                pcpu=$(cpu "$dir/prof.time")
                case $p in
                default) res="argstash (default, $(grep -o 'by the [a-z (_)]* sampler' "$dir/py.err" | head -1)): $(py_share "$dir/py.txt" '[py~]')$(kept "$dir/py.err")" ;;
                ptrace) res="argstash --sampler ptrace: $(py_share "$dir/py.txt" '[py]')" ;;
                py-spy) res="py-spy record: $(spy_share "$dir/py.txt")" ;;
                esac
                echo "load $l | round $r $res ($(py_truth "$out")); profiler CPU $(awk -v p="$pcpu" -v t="$tcpu" 'BEGIN { printf "%.1f%%", t ? 100 * p / t : 0 }') of the target's"
            done
        done
    done
fi
