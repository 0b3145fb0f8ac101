#!/usr/bin/env bash
# What a user does after `pip install argstash` into a venv, checked: usage
#   scripts/test-wheel-user.sh VENV
# VENV is a virtual environment into which the argstash wheel was just installed
# with pip. Checks, each printing what it found:
#  - VENV/bin/argstash is the native binary (an ELF executable, not a launcher script);
#  - `argstash --version` prints the installed distribution's version;
#  - `argstash --help` names every subcommand;
#  - `argstash demo`, run by name from PATH (the venv's bin first), hooks the demo
#    target and shows its arguments (bar's 28, foo's 5), then verifies the ejection;
#  - a pytest run in the venv of a test using the plugin's `argstash` fixture (a C
#    program started with bar hooked crashes; its crash report shows bar's arguments).
# Needs a C compiler (`cc`, or $CC). Runs scripts/test-python.sh, on the host and
# inside the sid root. Exits non-zero on the first failed check.
set -euo pipefail
venv=${1:?usage: test-wheel-user.sh VENV}
venv=$(cd "$venv" && pwd)
fail() { echo "test-wheel-user: FAIL: $*" >&2; exit 1; }
say() { echo "test-wheel-user: $*"; }

exe=$venv/bin/argstash
[[ -x $exe ]] || fail "$exe is missing: pip did not install the wheel's scripts"
[[ $(head -c 4 "$exe" | od -An -c | tr -d ' ') == '177ELF' ]] || fail "$exe is not an ELF binary: $(head -c 40 "$exe")"
say "ok: $exe is the native binary"

version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("argstash"))')
out=$("$exe" --version)
[[ $out == "argstash $version" ]] || fail "argstash --version printed '$out', expected 'argstash $version'"
say "ok: argstash --version: $out"

help=$("$exe" --help)
for sub in inject eject list bt record demo run; do
    grep -qE "^  $sub " <<<"$help" || fail "argstash --help does not list '$sub':"$'\n'"$help"
done
say "ok: argstash --help lists inject eject list bt record demo run"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
demo=$(PATH="$venv/bin:$PATH" argstash demo 2>&1) || fail "argstash demo failed:"$'\n'"$demo"
for want in 'in bar (rdi=28, ' 'in foo (rdi=5, ' '[stashed]' 'verified: the code of bar and foo in memory equals'; do
    grep -qF -- "$want" <<<"$demo" || fail "argstash demo did not print '$want':"$'\n'"$demo"
done
say "ok: argstash demo (from PATH) showed bar (rdi=28, ...) and foo (rdi=5, ...) [stashed] and restored both"

cat >crash.c <<'EOF'
#include <stdlib.h>
#include <string.h>
__attribute__((noipa)) int bar(int x, const char *s) {
    volatile int *p = 0;
    if (x == 28) *p = x;
    return x + (int)strlen(s);
}
__attribute__((noipa)) int foo(int n) { return bar(n * 5 + 3, "hello") + 1; }
int main(int argc, char **argv) { return foo(argc > 1 ? atoi(argv[1]) : 5) == 0; }
EOF
"${CC:-cc}" -O2 -g crash.c -o crash
cat >test_user.py <<'EOF'
import signal


def test_crash_report_shows_arguments(argstash):
    p = argstash.run(["./crash"], hooks=["bar"])
    assert p.wait() == -signal.SIGSEGV
    (report,) = argstash.crashes()
    assert "bar (x=28, s=" in report["text"], report["text"]
EOF
if ! out=$("$venv/bin/python" -m pytest -q -p no:cacheprovider -rP test_user.py 2>&1); then
    fail "the pytest run with the argstash fixture failed:"$'\n'"$out"
fi
grep -q "1 passed" <<<"$out" || fail "pytest did not report 1 passed:"$'\n'"$out"
grep -q "argstash backtraces" <<<"$out" || fail "pytest's report has no argstash backtraces section:"$'\n'"$out"
say "ok: pytest with the argstash fixture: $(grep -o '[0-9]* passed.*' <<<"$out" | tail -1)"
