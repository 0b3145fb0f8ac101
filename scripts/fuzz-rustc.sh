#!/bin/sh
# RUSTC_WRAPPER for scripts/fuzz.sh with FUZZ_COVERAGE=1: instruments only
# argstash's reader crates (reader, trampolines) with `-C instrument-coverage`,
# so the coverage the fuzzer counts is theirs, and the driver's own loops (which
# scan the counters after every input) are not counted themselves.
rustc=$1
shift
case " $* " in
*" --crate-name reader "* | *" --crate-name trampolines "*)
    exec "$rustc" "$@" -C instrument-coverage ;;
esac
exec "$rustc" "$@"
