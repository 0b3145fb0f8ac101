#!/usr/bin/env bash
# The pep523-ext tests (the `argstash` Python module): builds the wheel once with
# maturin, then for each CPython 3.11 build present (the `python3` on PATH, and
# Debian's static-libpython /usr/bin/python3.11 when it is another interpreter)
# installs it into a fresh venv under target/ and runs `pytest pep523-ext/tests`.
# Exits non-zero if any run fails. Extra arguments go to pytest.
#
# Dev profile: the tests need no optimised Rust (the hot path is generated code),
# and it shares compiled crates with `cargo test`. Needs scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
[[ $target == /* ]] || target=$PWD/$target

interpreters=()
seen=()
for candidate in python3 /usr/bin/python3.11; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    real=$("$candidate" -c 'import sys; print(sys.executable if sys.version_info[:2] == (3, 11) else "")') || continue
    if [[ -z $real ]]; then
        echo "test-python: skipping $candidate (not CPython 3.11, the only version tested)"
        continue
    fi
    real=$(readlink -f "$real")
    [[ " ${seen[*]} " == *" $real "* ]] && continue
    seen+=("$real")
    interpreters+=("$real")
done
((${#interpreters[@]})) || { echo "test-python: no CPython 3.11 found (run scripts/setup.sh)" >&2; exit 1; }

wheels=$target/wheels/pep523
rm -rf "$wheels"
python3 -m maturin build -m pep523-ext/Cargo.toml -i "${interpreters[0]}" -o "$wheels"
wheel=$(echo "$wheels"/argstash-*.whl)

status=0
for py in "${interpreters[@]}"; do
    if [[ $py == /usr/bin/* ]]; then venv=$target/py-venv-debian; else venv=$target/py-venv; fi
    echo "test-python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])')) in $venv"
    "$py" -m venv --clear --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
    "$venv/bin/python" -m pytest -q pep523-ext/tests "$@" || status=$?
done
exit "$status"
