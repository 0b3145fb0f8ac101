# Sourced by scripts/sid-root.sh and scripts/deb-root.sh: what both need to build a
# root with debootstrap into DIR/root.tmp.* and put it in place atomically.
# Needs `say` (the caller's message prefix) defined first.

# Anything left mounted inside a directory (debootstrap's /proc, /sys) is
# unmounted before that directory is removed: rm -rf must never descend into a
# live /proc or /sys.
unmount_under() {
    local d mounts
    d=$(realpath -m "$1")
    mounts=$(awk -v d="$d" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
    for m in $mounts; do
        umount -l "$m" 2>/dev/null || true
    done
}

# Removes a tree built here, unless something is still mounted inside it.
remove_tree() {
    [[ -e $1 ]] || return 0
    unmount_under "$1"
    if awk -v d="$(realpath -m "$1")" 'index($2, d "/") == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
        say "warning: $1 still has mounts; left in place" >&2
        return 0
    fi
    rm -rf --one-file-system "$1"
}

# Removes the half-built and replaced trees earlier interrupted builds left in DIR.
remove_leftovers() {
    local old
    for old in "$1"/root.tmp.* "$1"/root.old.*; do
        remove_tree "$old"
    done
}

# Puts the finished tree TMP at ROOT (DIR/root): renamed into place, the old root,
# if any, moved aside first and removed after, so ROOT is never half a root.
put_in_place() {
    local tmp=$1 root=$2 old
    if [[ -e $root ]]; then
        old=$(dirname "$root")/root.old.$$
        mv "$root" "$old"
        mv "$tmp" "$root"
        remove_tree "$old"
    else
        mv "$tmp" "$root"
    fi
}
