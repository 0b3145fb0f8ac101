#!/usr/bin/env bash
# Install what the argstash test suite needs on a Debian 12 machine.
#
# Idempotent: a need that is already met is skipped; `apt-get update` runs
# only if something has to be installed, and then once. Prints what it did.
# Needs root (or sudo) only when it has to install.
set -euo pipefail

# One need per line: "<debian package> <command proving it is there>", or
# "<debian package> -" to ask dpkg whether the package itself is installed.
NEEDS=(
    "gcc cc"               # compiles the C fixtures (tests/fixtures/*.c)
    "g++ g++"              # C++ fixtures (throws.cpp; dwarfcpp.cpp: demangling, inlining)
    "linux-perf perf"      # perf map / call-graph test (skipped where perf cannot record)
    "libc6-dev -"          # headers and crt files for the fixtures
    "binutils objdump"     # the harness's independent disassembler
    "binutils strip"       # the stripped (-O2, no debug info) fixture variant
    "binutils nm"          # symbol addresses and sizes
    "gdb gdb"              # cross-checking backtraces
    "cmake cmake"          # a C++ program from Debian's archive (tests/tests/e2e/real_code.rs)
    "xz-utils xz"          # MiniDebugInfo fixtures (.gnu_debugdata)
    "python3 python3"
    "dbus-daemon dbus-daemon"  # private buses for the argstashd tests
    "dbus-bin dbus-send"   # a D-Bus client no one here wrote
    "systemd busctl"       # another one
    "util-linux setpriv"   # runs a bus client as another uid
    "gcc-multilib -"       # 32-bit (-m32) fixtures for the i386 tests
    "libc6-dbg -"          # libc's .symtab and DWARF: IFUNC implementations by name (tests/tests/e2e/symbols.rs)
    # pep523-ext (scripts/test-python.sh): Debian's static-libpython CPython 3.11 is
    # the second interpreter the tests run under; Python.h for the C PEP 523 fixture.
    "python3.11 python3.11"
    "python3.11-dev -"
    "python3.11-venv -"
    "python3-pytest -"     # pytest for Debian's python3.11
    # argstash record: its SVG flame graph is checked in a headless browser (tests/tests/e2e/record.rs).
    "chromium chromium"
    "golang-go go"         # `go tool pprof` reads record's pprof output (tests/tests/e2e/record_pprof.rs)
    # The guide's CTest line (docs/guide/crash-reports.md) under ctest (tests/tests/e2e/runners.rs).
    "cmake cmake"
    # packaging/man: the man pages are checked with groff and `man -l` (tests/tests/e2e/packaging.rs).
    "groff-base groff"
    "man-db man"
    # The Debian package test (tests/tests/e2e/deb.rs) boots a bookworm root under systemd.
    "systemd-container systemd-nspawn"
    "debootstrap debootstrap"
    # bt --coredump reads cores stored by the real systemd-coredump (tests/tests/e2e/coredump.rs).
    "systemd-coredump coredumpctl"
)

# systemd-coredump's postinst points kernel.core_pattern at itself (and sets
# core_pipe_limit and suid_dumpable). The core tests need the kernel to write a
# plain file and the coredump test runs systemd-coredump itself, so the three
# settings are put back as they were after an install, and its sysctl.d file is
# masked so they stay so.
CORE_SYSCTLS=(kernel/core_pattern kernel/core_pipe_limit fs/suid_dumpable)
saved_sysctls=()
for k in "${CORE_SYSCTLS[@]}"; do
    saved_sysctls+=("$(cat "/proc/sys/$k" 2>/dev/null || true)")
done
restore_sysctls() {
    local i k
    for i in "${!CORE_SYSCTLS[@]}"; do
        k=${CORE_SYSCTLS[$i]}
        [[ -n ${saved_sysctls[$i]} ]] || continue
        if [[ $(cat "/proc/sys/$k") != "${saved_sysctls[$i]}" ]]; then
            echo "setup: restoring $k = ${saved_sysctls[$i]}"
            printf '%s\n' "${saved_sysctls[$i]}" | "${sudo[@]}" tee "/proc/sys/$k" >/dev/null
        fi
    done
}

have() {
    local pkg=$1 cmd=$2
    if [[ $cmd == - ]]; then
        [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true) == "install ok installed" ]]
    else
        command -v "$cmd" >/dev/null 2>&1
    fi
}

missing=()
for need in "${NEEDS[@]}"; do
    read -r pkg cmd <<<"$need"
    if have "$pkg" "$cmd"; then
        echo "setup: ok       $pkg ($cmd)"
    else
        echo "setup: missing  $pkg ($cmd)"
        [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
    fi
done

if ((${#missing[@]})); then
    sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || { echo "setup: need root to install: ${missing[*]}" >&2; exit 1; }
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    echo "setup: apt-get update"
    "${sudo[@]}" apt-get update -q
    echo "setup: apt-get install ${missing[*]}"
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
    restore_sysctls
    for need in "${NEEDS[@]}"; do
        read -r pkg cmd <<<"$need"
        have "$pkg" "$cmd" || { echo "setup: $pkg still missing after install" >&2; exit 1; }
    done
    echo "setup: installed ${missing[*]}"
else
    echo "setup: nothing to install"
fi
if [[ ! -e /etc/sysctl.d/50-coredump.conf ]] && have systemd-coredump -; then
    echo "setup: masking /usr/lib/sysctl.d/50-coredump.conf (keeps kernel.core_pattern as it is)"
    if ((EUID == 0)); then ln -s /dev/null /etc/sysctl.d/50-coredump.conf; else sudo ln -s /dev/null /etc/sysctl.d/50-coredump.conf; fi
fi

# pep523-ext: maturin builds the `argstash` wheel and pytest runs its tests under the
# `python3` on PATH (a pyenv CPython here). PIP_BREAK_SYSTEM_PACKAGES: when that
# python3 is Debian's own, pip would otherwise refuse (PEP 668) on this test machine.
if python3 -c 'import maturin, pytest' >/dev/null 2>&1; then
    echo "setup: ok       maturin, pytest (python3 -m pip)"
else
    echo "setup: python3 -m pip install maturin pytest"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore maturin pytest
    python3 -c 'import maturin, pytest' || { echo "setup: maturin/pytest still missing for python3" >&2; exit 1; }
fi
# The wheel's check (scripts/test-python.sh): `auditwheel show` reads its manylinux tag.
if python3 -c 'import auditwheel' >/dev/null 2>&1; then
    echo "setup: ok       auditwheel (python3 -m pip)"
else
    echo "setup: python3 -m pip install auditwheel"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore auditwheel
    python3 -c 'import auditwheel' || { echo "setup: auditwheel still missing for python3" >&2; exit 1; }
fi
# A current pip, as a wheel under the target dir: the sid root has no pip, and
# scripts/test-python.sh installs the argstash wheel there with this one (Debian 12's
# pip 23 fails under CPython 3.15: importlib.metadata's Distribution changed).
pip_wheels=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/python-wheels
if compgen -G "$pip_wheels/pip-*.whl" >/dev/null; then
    echo "setup: ok       pip wheel ($(cd "$pip_wheels" && echo pip-*.whl))"
else
    echo "setup: python3 -m pip download pip -d $pip_wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$pip_wheels" pip
fi

# The peers the benchmarks compare with (record_bench: py-spy record; `cargo bench -p
# argstashd --bench python_bt`: py-spy dump --native, pystack remote --native):
# PyPI packages with a command each; a failed install only warns.
# pipx: scripts/test-python.sh installs the wheel with it, as users install a tool.
if command -v pipx >/dev/null 2>&1; then
    echo "setup: ok       pipx"
else
    echo "setup: python3 -m pip install pipx"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore pipx
    command -v pyenv >/dev/null 2>&1 && pyenv rehash
    command -v pipx >/dev/null 2>&1 || { echo "setup: pipx still missing" >&2; exit 1; }
fi

for peer in py-spy pystack; do
    if command -v "$peer" >/dev/null 2>&1; then
        echo "setup: ok       $peer"
    else
        echo "setup: python3 -m pip install $peer"
        PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --root-user-action=ignore "$peer" \
            || echo "setup: warning: $peer not installed (only the Python bt benchmark needs it)" >&2
        # pyenv puts new commands on PATH through its shims.
        command -v pyenv >/dev/null 2>&1 && pyenv rehash
    fi
done

# Not installable from here: the Rust toolchain comes with the machine.
for tool in cargo rustc; do
    command -v "$tool" >/dev/null || { echo "setup: $tool not found (install a Rust toolchain)" >&2; exit 1; }
done
for sub in fmt clippy; do
    cargo "$sub" --version >/dev/null 2>&1 || echo "setup: warning: cargo $sub is not available" >&2
done

# cargo-machete (crates.io): .ci/run fails on a dependency that no code of its crate
# uses. Built from source once (~3 min on 2 cores); skipped when present.
MACHETE_VERSION=0.9.2
if cargo machete --version >/dev/null 2>&1; then
    echo "setup: ok       cargo-machete"
else
    echo "setup: cargo install cargo-machete@$MACHETE_VERSION"
    cargo install -q --locked "cargo-machete@$MACHETE_VERSION"
fi

# cargo-deb (crates.io): builds the Debian package (`cargo deb -p argstash`) that
# tests/tests/e2e/deb.rs installs in a booted bookworm container. Built from source once.
CARGO_DEB_VERSION=3.8.0
if cargo deb --version >/dev/null 2>&1; then
    echo "setup: ok       cargo-deb"
else
    echo "setup: cargo install cargo-deb@$CARGO_DEB_VERSION"
    cargo install -q --locked "cargo-deb@$CARGO_DEB_VERSION"
fi

# ptrace permission: informative only (tests attach to their own children).
if [[ -r /proc/sys/kernel/yama/ptrace_scope ]] && [[ $(cat /proc/sys/kernel/yama/ptrace_scope) == 3 ]]; then
    echo "setup: warning: kernel.yama.ptrace_scope=3 forbids ptrace; argstash tests will fail" >&2
fi

# The Debian sid root some e2e tests run their targets in (stripped libc, CPython
# 3.13-3.15, g++): built once (~1 min, ~800 MB) into /var/cache/argstash-sid/root,
# kept afterwards; where it cannot be built it says why and those tests skip.
bash "$(dirname "$0")/sid-root.sh" || echo "setup: warning: scripts/sid-root.sh failed; the tests that need the sid root will skip" >&2

# The clean Debian 12 root the Debian package test boots (systemd, dbus; gcc downloaded
# but not installed): built once (~2 min, ~400 MB) into /var/cache/argstash-deb/root.
bash "$(dirname "$0")/deb-root.sh" || echo "setup: warning: scripts/deb-root.sh failed; the Debian package test will skip" >&2
