#!/usr/bin/env bash
# Fuzz every reader of untrusted bytes (see docs/FUZZING.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET[,TARGET...]|all]
#
# Builds the stable driver (debug profile: overflow checks on, so arithmetic
# overflow in a reader is a finding), records seeds from real inputs under
# target/fuzz-work/seeds (fixtures compiled here with cc, a core of a running fixture
# hooked by argstash when its binary is built, a live CPython 3.11 if there is
# one, libc's functions), then fuzzes each target for SECONDS_PER_TARGET
# (default 25) together with the committed regression inputs in
# fuzz/regressions. Findings go to target/fuzz-work/findings; the exit status is 1
# when there is one. FUZZ_RELEASE=1 builds optimised with overflow checks kept
# (the `fuzz` profile; several times more executions per second); FUZZ_COVERAGE=1
# adds coverage feedback (inputs reaching new code join the corpus); FUZZ_WORK
# names another work directory (default target/fuzz-work).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-25}
which=${2:-all}
export XDG_CACHE_HOME="$PWD/target/xdg-cache"
# An instrumented build (FUZZ_COVERAGE=1) would write a profile at every exit.
export LLVM_PROFILE_FILE=/dev/null
work="${FUZZ_WORK:-$PWD/target/fuzz-work}"
# FUZZ_COVERAGE=1: instrument reader and trampolines for coverage feedback
# (stable rustc, see fuzz-rustc.sh), in a target directory of its own so the
# flag does not rebuild the rest of the workspace.
target_dir=target
if [ "${FUZZ_COVERAGE:-0}" = 1 ]; then
    export RUSTC_WRAPPER="$PWD/scripts/fuzz-rustc.sh"
    target_dir=target/fuzz-cov
fi
if [ "${FUZZ_RELEASE:-0}" = 1 ]; then
    cargo build --profile fuzz -p argstash-fuzz --target-dir "$target_dir"
    bin=$target_dir/fuzz/argstash-fuzz
else
    cargo build -p argstash-fuzz --target-dir "$target_dir"
    bin=$target_dir/debug/argstash-fuzz
fi
unset RUSTC_WRAPPER
rm -rf "$work/seeds" "$work/elf" "$work/core"
mkdir -p "$work/elf" "$work/core"

# Real ELF/DWARF inputs: fixtures as the tests build them, a few flavours.
elfs=()
build() { # OUT SRC FLAGS...
    local out=$1 src=$2; shift 2
    if cc "$@" -o "$work/elf/$out" "tests/fixtures/$src" -lpthread 2>/dev/null; then
        elfs+=(--elf "$work/elf/$out")
    fi
}
build seed-O2 seed.c -O2 -g
build seed-O0 seed.c -O0 -g
build dwarfargs-O2 dwarfargs.c -O2 -g
build dwarfargs-dwarf4 dwarfargs.c -O2 -gdwarf-4
build dwarfargs-zlib dwarfargs.c -O2 -g -gz=zlib
build prologues-O2 prologues.c -O2 -g
build cdecl32 cdecl32.c -m32 -O2 -g
if c++ -O2 -g -o "$work/elf/dwarfcpp" tests/fixtures/dwarfcpp.cpp 2>/dev/null; then
    elfs+=(--elf "$work/elf/dwarfcpp")
fi

# A real core: the seed fixture, hooked by argstash if it is built, dumped by gcore.
cores=()
if command -v gcore >/dev/null && [ -x "$work/elf/seed-O2" ]; then
    "$work/elf/seed-O2" >/dev/null &
    pid=$!
    sleep 0.5
    if [ -x target/debug/argstash ]; then
        target/debug/argstash inject --pid "$pid" --func bar --func foo >/dev/null 2>&1 || true
        sleep 0.2
    fi
    if gcore -o "$work/core/seed" "$pid" >/dev/null 2>&1; then
        cores+=(--core "$work/core/seed.$pid")
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
fi

python=()
if command -v python3.11 >/dev/null; then
    python=(--python "$(python3.11 -c "import sys; print(sys.executable)")")
fi

"$bin" seed "$work/seeds" "${elfs[@]}" "${cores[@]}" "${python[@]}"
"$bin" run "$which" --seconds "$secs" --corpus "$work/seeds" --corpus fuzz/regressions \
    --findings "$work/findings"
