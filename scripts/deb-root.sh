#!/usr/bin/env bash
# Build the clean Debian 12 ("bookworm") root the Debian package test boots
# (tests/tests/e2e/deb.rs): `systemd-nspawn -b` on it, `apt-get install ./argstash_*.deb`
# inside, then `argstash demo` and inject/bt/eject through a D-Bus-activated argstashd.
#
# What the root is: debootstrap's minbase of bookworm (this host's Debian release, so
# its glibc matches the binaries the package carries) plus systemd, systemd-sysv and
# dbus, i.e. a machine that boots. Nothing of argstash is in it. The packages the
# .deb recommends for `argstash demo` (gcc and what it pulls in) are downloaded into
# the root's apt cache (/var/cache/apt/archives) but not installed, so the test's
# `apt-get install ./argstash_*.deb` installs them as on any machine, without
# depending on the mirror at test time.
#
# Idempotent: a root whose stamp file lists the same packages is kept as it is.
# Otherwise it is built by debootstrap into a temporary directory next to it and
# renamed into place only when complete, so a failed or interrupted build never
# leaves a half root where the test looks for one. Where it cannot be built (no
# network, no root) it says so and exits 0: the test then skips with a printed reason.
#
#   ARGSTASH_DEB_ROOT_UNAVAILABLE=1   skip (the test skips too)
#   ARGSTASH_DEB_DIR=DIR              build into DIR/root instead of /var/cache/argstash-deb/root
#                                     (the test then needs ARGSTASH_DEB_ROOT=DIR/root)
set -euo pipefail

SUITE=bookworm
PACKAGES=systemd,systemd-sysv,dbus
PREFETCH="gcc libc6-dev"   # downloaded, not installed: what the .deb's Recommends pull in
DIR=${ARGSTASH_DEB_DIR:-/var/cache/argstash-deb}
ROOT=$DIR/root
STAMP=.argstash-deb-root   # inside the root: written before the rename, so it is atomic with it
WANT="$SUITE $PACKAGES prefetch=$PREFETCH"

say() { echo "deb-root: $*"; }

if [[ ${ARGSTASH_DEB_ROOT_UNAVAILABLE:-} == 1 ]]; then
    say "skipped (ARGSTASH_DEB_ROOT_UNAVAILABLE=1); the Debian package test will skip"
    exit 0
fi

current() { [[ -f $ROOT/$STAMP ]] && [[ $(cat "$ROOT/$STAMP") == "$WANT" ]]; }

if current; then
    say "ok       $ROOT ($WANT)"
    exit 0
fi

if ((EUID != 0)); then
    say "not built: debootstrap and chroot need root; the Debian package test will skip"
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    say "apt-get install debootstrap"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
        || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; }; }; then
        say "not built: debootstrap could not be installed; the Debian package test will skip"
        exit 0
    fi
fi

mkdir -p "$DIR"
chmod 755 "$DIR"
# One build at a time (two `scripts/setup.sh` runs at once).
exec 9>"$DIR/lock"
flock 9
if current; then
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
say "debootstrap $SUITE into $TMP (about a minute; log: $LOG)"
start=$SECONDS
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$TMP" >"$LOG" 2>&1; then
    say "not built: debootstrap failed (no network?); last lines of $LOG:"
    tail -n 5 "$LOG" | sed 's/^/deb-root:   /'
    say "the Debian package test will skip"
    exit 0
fi
unmount_under "$TMP"
# shellcheck disable=SC2086 # PREFETCH is a list of package names
if ! chroot "$TMP" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --download-only $PREFETCH >>"$LOG" 2>&1; then
    say "not built: downloading $PREFETCH into the root's apt cache failed; last lines of $LOG:"
    tail -n 5 "$LOG" | sed 's/^/deb-root:   /'
    exit 0
fi
unmount_under "$TMP"

missing=()
for f in usr/lib/systemd/systemd usr/bin/dbus-daemon usr/bin/apt-get; do
    [[ -x $TMP/$f ]] || missing+=("/$f")
done
compgen -G "$TMP/var/cache/apt/archives/gcc-12_*.deb" >/dev/null || missing+=("gcc-12 in the apt cache")
if ((${#missing[@]})); then
    say "not built: the new root lacks ${missing[*]}; the Debian package test will skip"
    exit 0
fi
# The booted container's hostname and machine id are its own, made at first boot.
rm -f "$TMP/etc/machine-id"
: >"$TMP/etc/machine-id"

echo "$WANT" >"$TMP/$STAMP"
put_in_place "$TMP" "$ROOT"
trap - EXIT
say "built    $ROOT in $((SECONDS - start)) s ($(du -sh --one-file-system "$ROOT" | cut -f1))"
