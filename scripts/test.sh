#!/usr/bin/env bash
# The project's test command (README.md and .ci/run both call this).
#
# Debug build: the tests do not need optimised argstash code and debug
# compiles much faster. --no-fail-fast: every test binary runs, so one
# failure does not hide the others. Two test threads: the machines have two cores and
# some fixtures (threads.c) keep eight threads busy. Extra arguments go to
# the test binaries, e.g. `scripts/test.sh seed` to filter by name.
set -euo pipefail
cd "$(dirname "$0")/.."
# The on-disk DWARF cache (reader/src/dwarf_cache.rs) of every argstash the tests
# run goes under target/, not into the user's ~/.cache.
export XDG_CACHE_HOME="$PWD/target/xdg-cache"
status=0
cargo test --workspace --no-fail-fast -- --test-threads=2 "$@" || status=$?
# The docs (README.md, docs/guide): every relative link and #anchor resolves, and
# every marked example's output is what the current build prints.
python3 scripts/check-links.py || status=$?
python3 scripts/docs-examples.py --check || status=$?
# Then the Python extension's pytest suite (pep523-ext), under each CPython 3.11 here
# and CPython 3.13-3.15 of the sid root (skipped, saying why, where it is missing).
scripts/test-python.sh || status=$?
exit "$status"
