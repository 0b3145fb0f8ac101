#!/usr/bin/env bash
# Build the Debian sid root some e2e tests run their targets in (tests/tests/e2e/sid_safe_points.rs,
# and the CPython 3.13-3.15 tests): `chroot /var/cache/argstash-sid/root python3.13 ...`.
#
# Why a sid root: this machine's Debian release has CPython 3.11 only, and its libc
# has a symbol table (libc6-dbg); sid's libc is stripped to `.dynsym`, which is what
# users' processes usually look like and what argstash must cope with (issue 19).
#
# Idempotent: a root whose stamp file lists the same packages is kept as it is (the
# check takes milliseconds). Otherwise the root is built by debootstrap into a
# temporary directory next to it and renamed into place only when complete, so a
# failed or interrupted build never leaves a half root where tests look for one.
# Where it cannot be built (no network, sid uninstallable today, no root) it says so
# and exits 0: the tests that need it skip with a printed reason.
#
#   ARGSTASH_SID_ROOT_UNAVAILABLE=1   skip (the tests skip too)
#   ARGSTASH_SID_DIR=DIR              build into DIR/root instead of /var/cache/argstash-sid/root
#                                     (the tests then need ARGSTASH_SID_ROOT=DIR/root)
#
# Facts about the root as built on 2026-11-26 (checked; re-check: sid moves):
# - debootstrap --variant=minbase with the packages below: 55-115 s, 924 MB; a second
#   run finds the stamp and returns in ~5 ms.
# - glibc 2.43 (`chroot ROOT ldd --version`); libc.so.6 is stripped to `.dynsym`
#   (+ .gnu_debuglink): a thread in time.sleep/sleep_for stops at the pc after the
#   `syscall` of an unnamed stub called by clock_nanosleep.
# - /usr/bin/python3.13 (3.13.18), python3.14 (3.14.10), python3.15 (3.15.2), built
#   by GCC 16.2, each linking libpython statically. 3.13 and 3.14 need libm, libz,
#   libexpat, libc; 3.15 also libzstd and libgcc_s.so.1, so argstash counts a 3.15
#   process as able to throw (a shared unwinder defines _Unwind_RaiseException) and
#   registers its hooks with libgcc; 3.13/3.14 processes need no registration.
# - /usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0, libpython3.14.so.1.0,
#   libpython3.15.so.1.0 (+ .so.1 links): for embedding programs.
# - g++ (GCC 16), libstdc++.so.6.0.36, libgcc_s.so.1: a C++ program built in the
#   root (`chroot ROOT g++ ...`) links them and can throw.
# - Read from the host, a chrooted process's /proc/PID/maps paths are host-absolute
#   (/var/cache/argstash-sid/root/usr/lib/...), /proc/PID/root links to the root.
set -euo pipefail

# -dev: Python.h and python3.1X-config, to build the pep523 extension and programs that
# embed libpython3.1X.so; python3-pytest: the extension's pytest suite under each of them.
PACKAGES=python3.13,python3.14,python3.15,libpython3.13,libpython3.14,libpython3.15,python3.13-dev,python3.14-dev,python3.15-dev,python3-pytest,g++,libstdc++6
DIR=${ARGSTASH_SID_DIR:-/var/cache/argstash-sid}
ROOT=$DIR/root
STAMP=.argstash-sid-root   # inside the root: written before the rename, so it is atomic with it

say() { echo "sid-root: $*"; }

if [[ ${ARGSTASH_SID_ROOT_UNAVAILABLE:-} == 1 ]]; then
    say "skipped (ARGSTASH_SID_ROOT_UNAVAILABLE=1); the tests that need it will skip"
    exit 0
fi

if [[ -f $ROOT/$STAMP ]] && [[ $(cat "$ROOT/$STAMP") == "$PACKAGES" ]]; then
    say "ok       $ROOT ($(cat "$ROOT/$STAMP"))"
    exit 0
fi

if ((EUID != 0)); then
    say "not built: debootstrap and chroot need root; the tests that need $ROOT will skip"
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    say "apt-get install debootstrap"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
        || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; }; }; then
        say "not built: debootstrap could not be installed; the tests that need $ROOT will skip"
        exit 0
    fi
fi

mkdir -p "$DIR"
chmod 755 "$DIR"
# One build at a time (two `scripts/setup.sh` runs at once).
exec 9>"$DIR/lock"
flock 9
if [[ -f $ROOT/$STAMP ]] && [[ $(cat "$ROOT/$STAMP") == "$PACKAGES" ]]; then
    say "ok       $ROOT (built by another run meanwhile)"
    exit 0
fi

# shellcheck source=scripts/lib/root-tree.sh
source "$(dirname "$0")/lib/root-tree.sh"
remove_leftovers "$DIR"

TMP=$(mktemp -d "$DIR/root.tmp.XXXXXX")
chmod 755 "$TMP"
LOG=$DIR/debootstrap.log
trap 'remove_tree "$TMP"' EXIT
say "debootstrap sid into $TMP (about a minute; log: $LOG)"
start=$SECONDS
if ! debootstrap --variant=minbase --include="$PACKAGES" sid "$TMP" >"$LOG" 2>&1; then
    say "not built: debootstrap failed (no network, or sid uninstallable today); last lines of $LOG:"
    tail -n 5 "$LOG" | sed 's/^/sid-root:   /'
    say "the tests that need $ROOT will skip"
    exit 0
fi
unmount_under "$TMP"

missing=()
for v in 3.13 3.14 3.15; do
    [[ -x $TMP/usr/bin/python$v ]] || missing+=("python$v")
    [[ -e $TMP/usr/lib/x86_64-linux-gnu/libpython$v.so.1.0 ]] || missing+=("libpython$v.so.1.0")
done
[[ -x $TMP/usr/bin/g++ ]] || missing+=("g++")
if ((${#missing[@]})); then
    say "not built: the new root lacks ${missing[*]}; the tests that need $ROOT will skip"
    exit 0
fi

echo "$PACKAGES" >"$TMP/$STAMP"
put_in_place "$TMP" "$ROOT"
trap - EXIT
say "built    $ROOT in $((SECONDS - start)) s ($(du -sh --one-file-system "$ROOT" | cut -f1)):" \
    "$(cd "$ROOT" && ls usr/bin/python3.1? usr/lib/x86_64-linux-gnu/libpython3.1?.so.1.0 | tr '\n' ' ')"
