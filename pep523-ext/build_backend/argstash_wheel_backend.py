"""The `argstash` wheel's PEP 517 build backend: maturin, plus the `argstash` command.

maturin builds the ``argstash._native`` extension (pyo3), but it does not put a
second Rust target, the CLI's binary, into the same wheel. So this backend first
builds the CLI crate (``cli/``, binary ``argstash``) with cargo, in the
workspace's own target directory (a second install rebuilds nothing that did not
change), copies the binary into the wheel data directory that pyproject.toml
names (``[tool.maturin] data``) under ``scripts/``, and hands over to maturin.
pip installs a wheel's ``scripts`` data into the environment's ``bin/`` as it
is: the ``argstash`` command is the native binary itself, not a Python launcher.

The Cargo profile is ``wheel`` (the workspace's release profile without debug
info, stripped) unless the maturin arguments (``MATURIN_PEP517_ARGS`` or the
``maturin.build-args`` config setting) name one with ``--profile``/``--release``;
the CLI and the extension are built with the same profile, for the venv's base
interpreter (the same build from every venv of it). The platform tag is
pyproject.toml's ``[tool.maturin] compatibility`` (maturin's own PEP 517 entry
defaults to a plain ``linux`` tag) unless the arguments name one.

The data directory is one per checkout, so a build holds an exclusive lock
(``build/wheel-data.lock`` next to it) from staging until maturin has written the
wheel: two builds at once (two pips, or a pip and the tests) take turns.

Run as a script, ``python3 argstash_wheel_backend.py maturin-build [--profile NAME]
[MATURIN BUILD ARGS...]`` stages the CLI and runs ``maturin build`` under the same
lock (the tests use it to build wheels for interpreters they cannot run here).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import maturin

# The only platform argstash runs on: its trampolines are x86-64 machine code and
# it attaches to processes through Linux's ptrace and /proc.
SUPPORTED = ("Linux", "x86_64")
DEFAULT_PROFILE = "wheel"
HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent  # pep523-ext: pyproject.toml, the extension's Cargo.toml
WORKSPACE = PROJECT.parent
CLI_MANIFEST = WORKSPACE / "cli" / "Cargo.toml"


class UnsupportedPlatform(SystemExit):
    """Raised (exiting the build with a message) on a platform argstash cannot run on."""


def check_platform() -> None:
    """Refuses to build anywhere but Linux on x86-64, naming the platform found."""
    system, machine = platform.system(), platform.machine()
    if (system, machine) != SUPPORTED:
        raise UnsupportedPlatform(
            f"argstash cannot be built or run on {system} {machine}: it supports only "
            f"{SUPPORTED[0]} on {SUPPORTED[1]} (its hooks are x86-64 machine code and it "
            "attaches to processes with Linux's ptrace). Install it on an x86-64 Linux machine."
        )


def _pyproject_maturin() -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11: maturin's own dependency
        import tomli as tomllib  # type: ignore[no-redef]

    with open(PROJECT / "pyproject.toml", "rb") as f:
        return tomllib.load(f).get("tool", {}).get("maturin", {})


def _maturin_args(config_settings: Mapping[str, Any] | None) -> list[str]:
    """maturin's arguments as its PEP 517 entry reads them, plus our profile and tag."""
    args = maturin.get_maturin_pep517_args(config_settings)
    if _profile_of(args) is None:
        args = [*args, "--profile", DEFAULT_PROFILE]
    if not any(a == "--compatibility" or a.startswith("--compatibility=") or a == "--manylinux" for a in args):
        tag = _pyproject_maturin().get("compatibility")
        if tag:
            args = [*args, "--compatibility", tag]
    return args


def _profile_of(args: list[str]) -> str | None:
    """The Cargo profile named by maturin-style arguments, or None."""
    for i, a in enumerate(args):
        if a in ("--release", "-r"):
            return "release"
        if a == "--profile" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--profile="):
            return a.split("=", 1)[1]
    return None


def _settings(config_settings: Mapping[str, Any] | None, args: list[str]) -> dict[str, Any]:
    # maturin builds for the venv's base interpreter (the same version and ABI): pyo3's
    # build script sees the same interpreter path from every venv, so installing into
    # another venv does not recompile pyo3 and the extension.
    os.environ.setdefault("MATURIN_PEP517_USE_BASE_PYTHON", "1")
    out = dict(config_settings or {})
    out.pop("build-args", None)
    out["maturin.build-args"] = args
    return out


def stage_cli(profile: str) -> Path:
    """Builds the `argstash` binary with `profile` and copies it to the wheel's scripts data."""
    if not CLI_MANIFEST.is_file():
        raise SystemExit(
            f"argstash: {CLI_MANIFEST} is missing: the wheel carries the `argstash` command, "
            "built from the workspace's cli crate, so it builds only from a full checkout "
            "of the argstash repository (not from pep523-ext/ alone)."
        )
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [
        cargo, "build", "--locked", "--manifest-path", str(CLI_MANIFEST), "--bin", "argstash",
        "--profile", profile, "--message-format", "json-render-diagnostics",
    ]
    print("argstash: building the command:", shlex.join(cmd), file=sys.stderr, flush=True)
    try:
        # Cargo's progress and diagnostics go to stderr; its JSON messages to stdout.
        out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    except FileNotFoundError:
        raise SystemExit("argstash: cargo is not on PATH: the wheel builds from Rust sources (https://rustup.rs)")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"argstash: building the `argstash` command failed (cargo exited with {e.returncode})")
    exe = None
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "argstash" and msg.get("executable"):
            exe = msg["executable"]
    if exe is None:
        raise SystemExit("argstash: cargo built no `argstash` executable (no artifact message)")
    data = PROJECT / _pyproject_maturin()["data"]
    scripts = data / "scripts"
    if data.exists():
        shutil.rmtree(data)
    scripts.mkdir(parents=True)
    dest = scripts / "argstash"
    shutil.copyfile(exe, dest)
    dest.chmod(0o755)
    return dest


@contextlib.contextmanager
def staging_lock():
    """Holds the data directory's lock: staging and packing by one build at a time."""
    build = PROJECT / "build"
    build.mkdir(exist_ok=True)
    fd = os.open(build / "wheel-data.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# ---- PEP 517 hooks (maturin's, after the platform check and the CLI build) ----


def get_requires_for_build_wheel(config_settings=None):
    check_platform()
    return maturin.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    check_platform()
    args = _maturin_args(config_settings)
    # maturin insists that the data directory exists; build_wheel fills it.
    (PROJECT / _pyproject_maturin()["data"]).mkdir(parents=True, exist_ok=True)
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, _settings(config_settings, args))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    check_platform()
    args = _maturin_args(config_settings)
    with staging_lock():
        stage_cli(_profile_of(args))
        return maturin.build_wheel(wheel_directory, _settings(config_settings, args), metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    check_platform()
    args = _maturin_args(config_settings)
    with staging_lock():
        stage_cli(_profile_of(args))
        return maturin.build_editable(wheel_directory, _settings(config_settings, args), metadata_directory)


get_requires_for_build_editable = get_requires_for_build_wheel
prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_sdist(sdist_directory, config_settings=None):
    # The sdist holds the extension's sources only (maturin's choice of files), not cli/.
    raise SystemExit(
        "argstash: no sdist: the wheel carries the `argstash` command built from the whole "
        "workspace; build the wheel from a checkout (pip install ./pep523-ext, or pip wheel)."
    )


get_requires_for_build_sdist = maturin.get_requires_for_build_sdist


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="Build the `argstash` command, stage it as the wheel's scripts data and run `maturin build`."
    )
    parser.add_argument("action", choices=["maturin-build"])
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help=f"Cargo profile (default: {DEFAULT_PROFILE})")
    ns, rest = parser.parse_known_args()
    check_platform()
    with staging_lock():
        stage_cli(ns.profile)
        cmd = [sys.executable, "-m", "maturin", "build", "--profile", ns.profile, *rest]
        sys.exit(subprocess.run(cmd, cwd=PROJECT).returncode)
