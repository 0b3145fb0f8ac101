"""End to end: `argstash bt --pid PID --json` on a Python process with the hook.

The program installs the hook, reports the addresses of its own interpreter
frames (and its thread state), and blocks in a known Python function. The
backtrace must show the eval frames that started after install as hooked, each
with the stashed (tstate, frame, throwflag) of exactly that Python call.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import argstash, ctypes, json, sys, time
ctypes.pythonapi.PyThreadState_Get.restype = ctypes.c_void_p
frames = {}
def here(name):
    frames[name] = argstash._frame_address(sys._getframe(1))
def block():
    info = argstash._hook_info()
    print(json.dumps({"frames": frames, "tstate": ctypes.pythonapi.PyThreadState_Get(),
                      "trampoline": info["trampoline"], "target": info["target"]}), flush=True)
    time.sleep(600)
"""


@pytest.fixture()
def blocked(empty_dir):
    """Starts a program that blocks; yields (pid, report); kills it afterwards."""
    procs = []

    def start(body):
        env = dict(os.environ, PYTHONPATH=str(empty_dir))
        env.pop("ARGSTASH_PEP523", None)
        p = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        line = p.stdout.readline()
        assert line, p.stderr.read()
        return p.pid, json.loads(line)

    yield start
    for p in procs:
        p.kill()
        p.wait()


def backtrace(argstash_bin, pid):
    out = subprocess.run(
        [str(argstash_bin), "bt", "--pid", str(pid), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    bt = json.loads(out.stdout)
    (thread,) = [t for t in bt["threads"] if t["tid"] == pid]
    # The native frames: the Python frames interleaved with them are not hooks.
    return [f for f in thread["frames"] if f["kind"] == "native"]


def stashed(frame):
    regs = {a["register"]: a["value"] for a in frame["args"]}
    return regs["rdi"], regs["rsi"], regs["rdx"] & 0xFFFF_FFFF


def writable_mapping(pid, addr):
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if lo <= addr < hi:
            return f[1].startswith("rw")
    return False


def test_eval_frames_are_hooked_with_their_frame_tstate_and_throwflag(argstash_bin, blocked):
    pid, report = blocked(
        """
        argstash.install()
        def blocked_here(depth, name):
            here("blocked_here")
            block()
        def middle(n):
            here("middle")
            return blocked_here(n, "zed")
        def outer():
            here("outer")
            return middle(3)
        outer()
        """
    )
    frames = backtrace(argstash_bin, pid)
    hooked = [f for f in frames if f.get("hooked")]
    # block -> blocked_here -> middle -> outer, innermost first; the module's frame
    # was running before install(): it has no stash. Its evaluator frame is named on
    # 3.11 only: from 3.13 on, Debian's exported _PyEval_EvalFrameDefault is a small
    # entry and the evaluator's body is unnamed code (so a hooked frame's own
    # `function` may be None there; its `hook` names what the trampoline calls).
    assert len(hooked) == 4, [(f["function"], f.get("hooked")) for f in frames]
    names = [f["function"] for f in frames]
    assert "PyEval_EvalCode" in names, names
    assert frames.index(hooked[-1]) < names.index("PyEval_EvalCode"), "a stash below the module's frame"
    if sys.version_info[:2] == (3, 11):
        evals = [f for f in frames if f["function"] == "_PyEval_EvalFrameDefault"]
        assert [f for f in evals if f.get("hooked")] == hooked and not evals[-1]["hooked"]
    got = [stashed(f) for f in hooked]
    want = [report["frames"][n] for n in ("blocked_here", "middle", "outer")]
    assert [rsi for _, rsi, _ in got[1:]] == want
    assert got[0][1] not in want and writable_mapping(pid, got[0][1])  # block()'s own frame
    for tstate, frame, throwflag in got:
        assert tstate == report["tstate"] != 0
        assert throwflag == 0
        assert writable_mapping(pid, frame) and writable_mapping(pid, tstate)
    for f in hooked:
        assert f["hook"] == "_PyEval_EvalFrameDefault"
        assert int(f["stash_frame"], 16) > 0


def test_a_generator_thrown_into_is_stashed_with_throwflag_1(argstash_bin, blocked):
    pid, report = blocked(
        """
        argstash.install()
        def gen():
            try:
                yield 1
            except ValueError:
                here("gen")
                block()
        g = gen()
        next(g)
        g.throw(ValueError("in"))
        """
    )
    hooked = [f for f in backtrace(argstash_bin, pid) if f.get("hooked")]
    tstate, frame, throwflag = stashed(hooked[1])
    assert (frame, throwflag, tstate) == (report["frames"]["gen"], 1, report["tstate"])


@pytest.mark.parametrize("order", ["c_first", "argstash_first"])
def test_chained_with_another_pep523_hook(argstash_bin, blocked, order):
    install = {
        "c_first": "empty_pep523.install(); argstash.install()",
        "argstash_first": "argstash.install(); empty_pep523.install()",
    }[order]
    pid, report = blocked(
        f"""
        import empty_pep523
        {install}
        def blocked_here():
            here("blocked_here")
            block()
        blocked_here()
        """
    )
    hooked = [f for f in backtrace(argstash_bin, pid) if f.get("hooked")]
    assert len(hooked) == 2, hooked
    assert stashed(hooked[1]) == (report["tstate"], report["frames"]["blocked_here"], 0)
    # The record names what the trampoline calls: the C hook when it was set first.
    want = "empty_eval" if order == "c_first" else "_PyEval_EvalFrameDefault"
    assert {f["hook"] for f in hooked} == {want}
