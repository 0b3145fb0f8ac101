#!/usr/bin/env bash
# The 1,000-round version of the exception tests (tests/tests/e2e/exceptions.rs):
# every shape, each round on a fresh process, inject and eject while exceptions fly.
# Prints each shape's rounds, deaths and wrong-result rounds.
# Usage: scripts/exception-rounds.sh [ROUNDS]   (default 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_CACHE_HOME="$PWD/target/xdg-cache"
ARGSTASH_EXCEPTION_ROUNDS="${1:-1000}" cargo test -p argstash-tests --test e2e exceptions:: \
    -- --test-threads=1 --nocapture 2>&1 | grep -E -A3 "exceptions::[a-z_]+ x[0-9]+:|test result|FAILED|panicked"
