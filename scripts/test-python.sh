#!/usr/bin/env bash
# The pep523-ext tests (the `argstash` Python package) and its wheel as users get it:
# builds the wheel once through its own build backend, as pip does (pip wheel,
# pep523-ext/build_backend: maturin plus the `argstash` command), then for each
# CPython 3.11 build present (the `python3` on PATH, and Debian's static-libpython
# /usr/bin/python3.11 when it is another interpreter) pip-installs it into a fresh
# venv under target/, checks what a user does with it (scripts/test-wheel-user.sh:
# the venv's `argstash` command, its --version, --help and demo, a pytest run with
# the plugin's fixture) and runs `pytest pep523-ext/tests`.
#
# Then the same suite under CPython 3.13, 3.14 and 3.15 of the sid root
# (scripts/sid-root.sh; ARGSTASH_SID_ROOT overrides its path), each skipped with
# a printed reason when the root, that interpreter, its headers or pytest are
# missing. The extension has no abi3 build (private PEP 523 API), so each version
# gets its own wheel, built on the host without running that interpreter (its
# glibc is newer than the host's): pyo3 reads a config file written from the
# root's own pyconfig.h (PYO3_CONFIG_FILE, which maturin honours), by `maturin
# build` run by the build backend after it put the command in place. A wheel is
# built once per version and source hash (target/pep523-sid/). Its tests run
# inside the root, in a private mount namespace (unshare) holding the root's
# /proc, a tmpfs /tmp and this checkout at /mnt: nothing is mounted or written
# in the shared root itself. The root has no pip: the venv gets pip from a current
# pip wheel (scripts/setup.sh), as ensurepip would, and that pip installs the
# argstash wheel; the same user checks follow. ARGSTASH_SID_PYTHONS="3.14" limits
# the versions; ARGSTASH_HOST_PYTHON=0 skips the host's 3.11 runs.
#
# Exits non-zero if any run fails. Extra arguments go to pytest.
#
# Dev profile: the tests need no optimised Rust (the hot path is generated code),
# and it shares compiled crates with `cargo test` (the wheel's `argstash` is
# target/debug/argstash). Users' installs build the `wheel` profile. Needs
# scripts/setup.sh.
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
        echo "test-python: skipping $candidate (not CPython 3.11; 3.13-3.15 are tested in the sid root below)"
        continue
    fi
    real=$(readlink -f "$real")
    [[ " ${seen[*]} " == *" $real "* ]] && continue
    seen+=("$real")
    interpreters+=("$real")
done
((${#interpreters[@]})) || { echo "test-python: no CPython 3.11 found (run scripts/setup.sh)" >&2; exit 1; }
if [[ ${ARGSTASH_HOST_PYTHON:-1} == 0 ]]; then
    echo "test-python: skipping the host's CPython 3.11 (ARGSTASH_HOST_PYTHON=0)"
    interpreters=()
fi

status=0
if ((${#interpreters[@]})); then
    wheels=$target/wheels/pep523
    rm -rf "$wheels"
    # pip runs the project's build backend (pyproject.toml) in this checkout, with the
    # host's maturin (no build isolation: nothing is downloaded). The tag is cp311.
    MATURIN_PEP517_ARGS="--profile dev" "${interpreters[0]}" -m pip wheel -q --no-build-isolation --no-deps \
        -w "$wheels" ./pep523-ext
    wheel=$(echo "$wheels"/argstash-*.whl)
    # Its tag is one auditwheel agrees with, for every ELF file in it (the command too).
    tag=manylinux_2_34_x86_64
    [[ $wheel == *-$tag.whl ]] || { echo "test-python: FAIL: $wheel is not tagged $tag" >&2; status=1; }
    audit=$(python3 -m auditwheel show "$wheel")
    if grep -qF "consistent with the following platform tag: \"$tag\"" <<<"${audit//$'\n'/ }"; then
        echo "test-python: ok: auditwheel show: $tag"
    else
        echo "test-python: FAIL: auditwheel show does not confirm $tag:"$'\n'"$audit" >&2
        status=1
    fi
fi
# An unsupported platform is refused with a message, by pip (the wheel's tag) and by
# the build backend (from source). Provoked for real: under `setarch i686` the kernel
# reports an i686 machine (uname), so Python and pip see linux-i686.
if ((${#interpreters[@]})); then
    py=${interpreters[0]}
    if ! setarch i686 true 2>/dev/null; then
        echo "test-python: skipping the unsupported-platform checks: setarch i686 does not run here"
    else
        refuse() { # expected-text command...
            local want=$1 out; shift
            if out=$("$@" 2>&1); then
                echo "test-python: FAIL: '$*' succeeded under setarch i686" >&2; status=1
            elif grep -qF -- "$want" <<<"$out"; then
                echo "test-python: ok: refused on i686: $(grep -F -- "$want" <<<"$out" | head -1 | sed 's/^ *//')"
            else
                echo "test-python: FAIL: '$*' under setarch i686 did not say '$want':"$'\n'"$out" >&2; status=1
            fi
        }
        refuse "is not a supported wheel on this platform" \
            setarch i686 "$py" -m pip install --dry-run --no-index --no-deps "$wheel"
        refuse "argstash cannot be built or run on Linux i686: it supports only Linux on x86_64" \
            setarch i686 "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$target/wheels/refused" ./pep523-ext
    fi
fi
for py in "${interpreters[@]}"; do
    if [[ $py == /usr/bin/* ]]; then venv=$target/py-venv-debian; else venv=$target/py-venv; fi
    echo "test-python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])')) in $venv"
    "$py" -m venv --clear --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
    scripts/test-wheel-user.sh "$venv" || status=$?
    "$venv/bin/python" -m pytest -q pep523-ext/tests "$@" || status=$?
done

# pipx, as a user installs a command-line tool: its own venv under PIPX_HOME (here in
# target/), the command linked into PIPX_BIN_DIR. pipx fetches pip for its shared
# environment from PyPI the first time. The linked command must be the native binary
# and run the demo.
if ((${#interpreters[@]})) && [[ -n ${wheel:-} ]]; then
    if ! command -v pipx >/dev/null 2>&1; then
        echo "test-python: FAIL: pipx is missing (scripts/setup.sh installs it)" >&2
        status=1
    else
        pipx_home=$target/pipx
        rm -rf "$pipx_home"
        if PIPX_HOME=$pipx_home PIPX_BIN_DIR=$pipx_home/bin PIPX_MAN_DIR=$pipx_home/man \
            pipx install --python "${interpreters[0]}" --pip-args=--no-deps "$wheel"; then
            linked=$pipx_home/bin/argstash
            if [[ $(head -c 4 "$linked" | od -An -c | tr -d ' ') != '177ELF' ]]; then
                echo "test-python: FAIL: pipx's $linked is not the native binary" >&2; status=1
            elif ! out=$(cd "$(mktemp -d)" && PATH="$pipx_home/bin:$PATH" argstash demo 2>&1) \
                || ! grep -q 'bar (rdi=28' <<<"$out"; then
                echo "test-python: FAIL: argstash demo through pipx's link:"$'\n'"$out" >&2; status=1
            else
                echo "test-python: ok: pipx install $(basename "$wheel"): $linked runs the demo (bar (rdi=28, ...))"
            fi
        else
            echo "test-python: FAIL: pipx install $wheel" >&2; status=1
        fi
    fi
fi

# ---- CPython 3.13-3.15 in the sid root ----
root=${ARGSTASH_SID_ROOT:-/var/cache/argstash-sid/root}
sid_skip() { echo "test-python: skipping CPython $1 of the sid root: $2"; }
sid_versions=()
if [[ ${ARGSTASH_SID_ROOT_UNAVAILABLE:-} == 1 ]]; then
    sid_skip "3.13-3.15" "ARGSTASH_SID_ROOT_UNAVAILABLE=1"
elif [[ ! -d $root/usr/bin ]]; then
    sid_skip "3.13-3.15" "no root at $root (scripts/sid-root.sh builds it)"
elif ((EUID != 0)); then
    sid_skip "3.13-3.15" "chroot and the private mounts need root"
elif ! command -v unshare >/dev/null 2>&1; then
    sid_skip "3.13-3.15" "unshare (util-linux) is missing"
elif ! unshare --mount --propagation private -- mount -t tmpfs tmpfs "$root/tmp" 2>/dev/null; then
    sid_skip "3.13-3.15" "cannot mount in a private mount namespace here (unshare --mount; a container without CAP_SYS_ADMIN?)"
else
    for v in ${ARGSTASH_SID_PYTHONS:-3.13 3.14 3.15}; do
        if [[ ! -x $root/usr/bin/python$v ]]; then
            sid_skip "$v" "$root/usr/bin/python$v is missing"
        elif [[ ! -f $root/usr/include/python$v/Python.h || ! -f $root/usr/include/x86_64-linux-gnu/python$v/pyconfig.h ]]; then
            sid_skip "$v" "its headers are missing (python$v-dev; rerun scripts/sid-root.sh)"
        elif [[ ! -d $root/usr/lib/python3/dist-packages/_pytest ]]; then
            sid_skip "$v" "pytest is missing in the root (python3-pytest; rerun scripts/sid-root.sh)"
        else
            sid_versions+=("$v")
        fi
    done
fi

if ((${#sid_versions[@]})); then
    # The suite runs the CLI inside the root; a host build runs there (its glibc is newer).
    # The same binary is the wheel's `argstash` command.
    cargo build -q -p argstash
    mkdir -p "$PWD/target"
    sid=$target/pep523-sid
    mkdir -p "$sid"
    # What the wheel is built from: the extension's crate, the workspace crates it links,
    # the lock file, and the staged command.
    hash=$( { git ls-files -z --cached --others --exclude-standard -- pep523-ext/src pep523-ext/python pep523-ext/build.rs pep523-ext/Cargo.toml pep523-ext/pyproject.toml \
        trampolines injector reader Cargo.toml Cargo.lock; printf '%s\0' "$target/debug/argstash"; } \
        | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
    # pip for the root's venvs (the root has none): a current pip wheel (scripts/setup.sh).
    pipwheel=$(compgen -G "$target/python-wheels/pip-*.whl" | sort -V | tail -1 || true)
    [[ -n $pipwheel ]] || { echo "test-python: no pip wheel in $target/python-wheels (run scripts/setup.sh)" >&2; exit 1; }
fi
for v in "${sid_versions[@]}"; do
    pyconfig=$root/usr/include/x86_64-linux-gnu/python$v/pyconfig.h
    flags=()
    for flag in Py_DEBUG Py_REF_DEBUG Py_TRACE_REFS Py_GIL_DISABLED; do
        grep -q "^#define $flag 1" "$pyconfig" && flags+=("$flag")
    done
    wheels=$sid/$v-$hash
    if ! compgen -G "$wheels/argstash-*.whl" >/dev/null; then
        rm -rf "$sid/$v"-*
        mkdir -p "$wheels"
        cfg=$wheels/pyo3.cfg
        # lib_name/lib_dir stay unset: an extension module does not link libpython.
        printf '%s\n' implementation=CPython "version=$v" shared=true abi3=false pointer_width=64 \
            "build_flags=$(IFS=,; echo "${flags[*]}")" suppress_build_script_link_lines=false >"$cfg"
        echo "test-python: building the extension for CPython $v (pyo3 config from $pyconfig)"
        if ! PYO3_CONFIG_FILE=$cfg python3 pep523-ext/build_backend/argstash_wheel_backend.py maturin-build --profile dev \
            -q -i "python$v" -o "$wheels"; then
            echo "test-python: the extension did not build for CPython $v" >&2
            rm -rf "$wheels"
            status=1
            continue
        fi
    fi
    wheel=$(echo "$wheels"/argstash-*.whl)
    venv=$sid/venv-$v
    rm -rf "$venv"
    echo "test-python: $root/usr/bin/python$v ($(chroot "$root" "python$v" -c 'import sys; print(sys.version.split()[0])')) in $venv"
    # Inside the namespace: the root's own /proc and a private /tmp, this checkout at
    # /mnt and the target dir at /mnt/target; chroot; a venv of the root's interpreter
    # (with its pytest) into which pip (from the pip wheel, copied to the private
    # /tmp) installs pip itself and then the argstash wheel; then the user checks, then
    # the suite.
    unshare --mount --propagation private -- bash -euo pipefail -c '
        root=$1 repo=$2 target=$3 venv=$4 wheel=$5 v=$6 pipwheel=$7; shift 7
        mount -t proc proc "$root/proc"
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        mount --bind "$repo" "$root/mnt"
        mount --bind "$target" "$root/mnt/target"
        inner=/mnt/target/${venv#"$target"/}
        cp "$pipwheel" "$wheel" "$root/tmp/"
        in_root() {
            chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 \
                XDG_CACHE_HOME=/tmp/xdg-cache PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
                PYTHONWARNINGS=ignore::SyntaxWarning ARGSTASH_BIN=/mnt/target/debug/argstash \
                CARGO_TARGET_DIR=/mnt/target "$@"
        }
        in_root "python$v" -m venv --without-pip --system-site-packages "$inner"
        in_root "$inner/bin/python" "/tmp/${pipwheel##*/}/pip" install -q --no-index --no-deps "/tmp/${pipwheel##*/}"
        in_root "$inner/bin/pip" install -q --no-index --no-deps "/tmp/${wheel##*/}"
        in_root /mnt/scripts/test-wheel-user.sh "$inner"
        in_root "$inner/bin/python" -m pytest -q -rs -p no:cacheprovider /mnt/pep523-ext/tests "$@"
    ' sid-pytest "$root" "$PWD" "$target" "$venv" "$wheel" "$v" "$pipwheel" "$@" || status=$?
done
exit "$status"
