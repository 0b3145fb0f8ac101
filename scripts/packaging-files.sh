#!/usr/bin/env bash
# Regenerate the files under packaging/ that come from the command-line definitions
# (cli/src/main.rs, cli/src/args.rs, cli/src/record, cli/src/run.rs, daemon/src/main.rs):
#   packaging/man/argstash.1, argstash-SUBCOMMAND.1   (argstash man-pages DIR, hidden)
#   packaging/man/argstashd.8                         (argstashd --print-man-page, hidden)
#   packaging/completions/argstash.bash, _argstash, argstash.fish  (argstash completions SHELL)
# The Debian package (cli/Cargo.toml, [package.metadata.deb]) installs these copies;
# tests/tests/e2e/packaging.rs fails when they differ from what the binaries print.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet -p argstash -p argstashd
bin=${CARGO_TARGET_DIR:-target}/debug
rm -rf packaging/man packaging/completions
mkdir -p packaging/man packaging/completions
"$bin/argstash" man-pages packaging/man
"$bin/argstashd" --print-man-page >packaging/man/argstashd.8
"$bin/argstash" completions bash >packaging/completions/argstash.bash
"$bin/argstash" completions zsh >packaging/completions/_argstash
"$bin/argstash" completions fish >packaging/completions/argstash.fish
echo "packaging-files: wrote $(find packaging/man packaging/completions -type f | wc -l) files under packaging/man and packaging/completions"
