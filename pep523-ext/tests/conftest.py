"""Shared fixtures: the C PEP 523 hook, subprocess runners, the argstash CLI.

Every test that changes the interpreter's eval function runs its program in a
fresh interpreter (`run_py`), the same one running pytest (`sys.executable`), so
tests cannot leak a hook into each other and each interpreter build is tested by
running the suite under it.
"""

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURE_C = REPO / "tests" / "fixtures" / "python" / "empty_pep523.c"


def build_empty_pep523(out_dir: Path, python: str = sys.executable) -> Path:
    """Compiles the empty C PEP 523 hook for `python` into `out_dir`; returns the directory."""
    query = "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"
    include, suffix = subprocess.run(
        [python, "-c", query], check=True, capture_output=True, text=True
    ).stdout.split()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"empty_pep523{suffix}"
    cc = os.environ.get("CC", "cc")
    subprocess.run(
        [cc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{include}", str(FIXTURE_C), "-o", str(target)],
        check=True,
    )
    return out_dir


@pytest.fixture(scope="session")
def empty_dir(tmp_path_factory) -> Path:
    """Directory holding the compiled `empty_pep523` module for this interpreter."""
    return build_empty_pep523(tmp_path_factory.mktemp("empty_pep523"))


@pytest.fixture()
def run_py(empty_dir):
    """Runs a Python snippet in a fresh interpreter; returns the CompletedProcess.

    The snippet can `import empty_pep523`. `env` adds variables; `check` asserts exit 0.
    """

    def run(code, env=None, check=True, timeout=120, args=()):
        full_env = dict(os.environ)
        full_env.pop("ARGSTASH_PEP523", None)
        full_env["PYTHONPATH"] = os.pathsep.join([str(empty_dir), full_env.get("PYTHONPATH", "")])
        full_env.update(env or {})
        p = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
        return p

    return run


@pytest.fixture(scope="session")
def argstash_bin() -> Path:
    """The argstash CLI: $ARGSTASH_BIN, else `cargo build -p argstash` -> target/debug/argstash."""
    if os.environ.get("ARGSTASH_BIN"):
        return Path(os.environ["ARGSTASH_BIN"])
    subprocess.run(["cargo", "build", "-q", "-p", "argstash"], cwd=REPO, check=True, timeout=1800)
    target = REPO / os.environ.get("CARGO_TARGET_DIR", "target")
    return target / "debug" / "argstash"


PROBE_PY = """
import sys, time
def argstash_probe_frame(depth):
    print("ready", flush=True)
    time.sleep(120)
argstash_probe_frame(3)
"""


@pytest.fixture(scope="session")
def python_frames_unreadable():
    """Why the reader cannot show this interpreter's Python frames, or None when it can.

    Found by trying: `argstash.backtrace` of a child of this interpreter blocked in a
    known function. The Python frames in a mixed stack are the reader's work (it
    reads 3.11 today; 3.13+ comes with issue 22), not the extension's, so the tests
    of mixed stacks skip, saying why, where the reader does not read them yet.
    """
    import argstash

    p = subprocess.Popen([sys.executable, "-c", PROBE_PY], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        bt = argstash.backtrace(p.pid)
    finally:
        p.kill()
        p.wait()
    frames = [f for t in bt["threads"] for f in t["frames"]]
    if any(f["kind"] == "python" and f.get("function") == "argstash_probe_frame" for f in frames):
        return None
    notes = sorted({n for t in bt["threads"] for n in t.get("python_notes", [])})
    version = sys.version.split()[0]
    return (
        f"argstash's reader shows no Python frames of CPython {version} yet"
        + (f" ({'; '.join(notes)})" if notes else " (no note given)")
        + ": the mixed-stack checks need it (issue 22)"
    )


@pytest.fixture()
def needs_python_frames(python_frames_unreadable):
    """Skips the test, saying why, when the reader cannot show this interpreter's Python frames."""
    if python_frames_unreadable is not None:
        pytest.skip(python_frames_unreadable)
