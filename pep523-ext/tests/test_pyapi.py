"""The library API (`argstash.inject/eject/backtrace/run`) and the pytest plugin,
against real crashing and hanging C programs compiled here (-O2 -g)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import argstash as argstash_module

pytest_plugins = ["pytester"]

# bar(28) dereferences null; hang calls wait_for(7, 0x5eed) (a 20 ms sleep) forever. noipa keeps
# gcc from cloning them (bar.constprop.0) or passing arguments its own way.
CRASH_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noipa)) int bar(int x, const char *s) {
    volatile int *p = 0;
    if (x == 28) *p = x;
    return x + (int)strlen(s);
}
__attribute__((noipa)) int foo(int n) { return bar(n * 5 + 3, "hello") + 1; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    printf("start %d\n", n);
    fflush(stdout);
    return foo(n) == 0;
}
"""

HANG_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((noipa)) int wait_for(int fd, long cookie) {
    usleep(20000);
    return fd + (int)cookie;
}
int main(void) {
    volatile int sum = 0;
    printf("ready\n");
    fflush(stdout);
    for (;;) sum += wait_for(7, 0x5eed);
}
"""


def _compile(tmp_path_factory, name, source):
    d = tmp_path_factory.mktemp(name)
    src = d / f"{name}.c"
    src.write_text(source)
    exe = d / name
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-g", str(src), "-o", str(exe)], check=True)
    return str(exe)


@pytest.fixture(scope="session")
def crash_exe(tmp_path_factory):
    """A C program whose bar(28) dies of SIGSEGV (run it with no argument)."""
    return _compile(tmp_path_factory, "crash", CRASH_C)


@pytest.fixture(scope="session")
def hang_exe(tmp_path_factory):
    """A C program that prints `ready` then calls wait_for(7, 0x5eed) (20 ms) forever."""
    return _compile(tmp_path_factory, "hang", HANG_C)


@pytest.fixture()
def hanging(hang_exe):
    """A running hang_exe (started by subprocess, not argstash), killed at the end."""
    p = subprocess.Popen([hang_exe], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    yield p
    p.kill()
    p.wait()


def frames_named(bt, name):
    return [f for t in bt["threads"] for f in t["frames"] if f.get("function") == name]


def test_inject_backtrace_eject(hanging):
    assert argstash_module.inject(hanging.pid, ["wait_for"]) == ["wait_for"]
    time.sleep(0.1)  # the next call of wait_for goes through the hook
    bt = argstash_module.backtrace(hanging.pid)
    assert bt["pid"] == hanging.pid
    (frame,) = frames_named(bt, "wait_for")
    assert frame["hooked"] is True
    assert [a["value"] for a in frame["args"][:2]] == [7, 0x5EED]
    text = argstash_module.backtrace(hanging.pid, text=True)
    assert "wait_for (fd=7, cookie=24301) [stashed]" in text
    with pytest.raises(argstash_module.AlreadyHooked, match=r"eject it first with argstash\.eject\(pid, \[\"wait_for\"\]\)"):
        argstash_module.inject(hanging.pid, "wait_for")
    assert argstash_module.eject(hanging.pid, ["wait_for"]) == 1
    with pytest.raises(argstash_module.NotHooked, match="wait_for is not hooked"):
        argstash_module.eject(hanging.pid, ["wait_for"])
    assert argstash_module.eject(hanging.pid) == 0
    assert hanging.poll() is None


def test_errors_are_typed_with_the_cli_messages(hanging):
    dead = subprocess.Popen(["true"])
    dead.wait()
    with pytest.raises(argstash_module.NoSuchProcess, match=rf"no process with pid {dead.pid}"):
        argstash_module.backtrace(dead.pid)
    with pytest.raises(argstash_module.SymbolNotFound) as e:
        argstash_module.inject(hanging.pid, ["no_such_function_here"])
    assert isinstance(e.value, argstash_module.Error)
    with pytest.raises(argstash_module.NotPython):
        argstash_module.inject(hanging.pid, [], python=True)
    with pytest.raises(argstash_module.NotPermitted, match="itself"):
        argstash_module.backtrace(os.getpid())
    with pytest.raises(ValueError):
        argstash_module.inject(0, ["x"])
    # Nothing was left behind by the failures.
    assert argstash_module.eject(hanging.pid) == 0


def test_run_reports_a_crash_and_dies_of_the_same_signal(crash_exe):
    p = argstash_module.run([crash_exe], hooks=["bar", "foo"], stdout=subprocess.PIPE, text=True)
    assert sorted(p.hooks) == ["bar", "foo"]
    out, err = p.communicate(timeout=60)
    assert out == "start 5\n" and err is None
    assert p.returncode == -signal.SIGSEGV
    (report,) = p.reports()
    assert report["reason"] == "crash" and report["signal"] == signal.SIGSEGV
    assert report["pid"] == p.pid and report["error"] is None
    (bar,) = frames_named(report["backtrace"], "bar")
    assert bar["args"][0]["value"] == 28
    assert "bar" in report["text"] and "foo" in report["text"]


def test_run_is_popen_like(hang_exe, crash_exe):
    p = argstash_module.run([hang_exe], hooks=["wait_for"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout.readline() == b"ready\n"
    assert p.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    (frame,) = frames_named(p.backtrace(), "wait_for")
    assert frame["args"][1]["value"] == 0x5EED
    # From outside the handle: read through the supervisor; hooking refused, saying why.
    (frame,) = frames_named(argstash_module.backtrace(p.pid), "wait_for")
    with pytest.raises(argstash_module.NotPermitted, match=r"started by argstash\.run\(\) in this process"):
        argstash_module.inject(p.pid, ["main"])
    p.kill()
    assert p.wait(timeout=30) == -signal.SIGKILL
    assert p.reports() == []
    p.stdout.close()
    # No crash, an ordinary exit: the child's own status and output, env and cwd honoured.
    q = argstash_module.run(
        [crash_exe, "1"], hooks=["bar"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={"X": "1"}, cwd="/"
    )
    assert q.communicate(timeout=60) == (b"start 1\n", None)
    assert q.returncode == 0 and q.reports() == []


def test_run_stdio_as_popen():
    p = argstash_module.run(["sh", "-c", "echo out; echo err >&2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.communicate(timeout=60) == ("out\nerr\n", None)
    with argstash_module.run(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as q:
        assert q.communicate(b"hello", timeout=60) == (b"hello", None)
    assert q.returncode == 0
    assert isinstance(q, argstash_module.Process)


def test_run_bad_input(crash_exe, tmp_path):
    with pytest.raises(argstash_module.CommandNotFound, match="command not found"):
        argstash_module.run(["/no/such/program"], hooks=["main"])
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    with pytest.raises(argstash_module.NotExecutable):
        argstash_module.run([str(plain)])
    with pytest.raises(argstash_module.SymbolNotFound):
        argstash_module.run([crash_exe], hooks=["no_such_function_here"])
    with pytest.raises(TypeError, match="preexec_fn"):
        argstash_module.run([crash_exe], preexec_fn=lambda: None)
    with pytest.raises(ValueError, match="empty"):
        argstash_module.run([])


# The plugin, through pytester (the tests run in this interpreter, in process).


def _inner(pytester, body, crash_exe, hang_exe):
    pytester.makepyfile(
        "import signal, subprocess, time\n"
        f"CRASH = {crash_exe!r}\nHANG = {hang_exe!r}\n" + textwrap.dedent(body)
    )


def test_plugin_reports_a_crash(pytester, crash_exe, hang_exe):
    _inner(
        pytester,
        """
        def test_crashes(argstash):
            p = argstash.run([CRASH], hooks=["bar"])
            assert p.wait() == 0
        """,
        crash_exe,
        hang_exe,
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "argstash backtraces" in out
    assert "crashed: thread" in out and "got SIGSEGV" in out
    assert "killed by SIGSEGV" in out
    assert "bar (x=28, s=" in out


def test_plugin_section_on_a_passing_test_with_a_crash(pytester, crash_exe, hang_exe):
    _inner(
        pytester,
        """
        def test_expects_the_crash(argstash):
            p = argstash.run([CRASH], hooks=["bar"])
            assert p.wait() == -signal.SIGSEGV
            assert len(argstash.crashes()) == 1
        """,
        crash_exe,
        hang_exe,
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rP")
    result.assert_outcomes(passed=1)
    assert "argstash backtraces" in result.stdout.str()


def test_plugin_reports_live_processes_of_a_failing_test(pytester, crash_exe, hang_exe):
    _inner(
        pytester,
        """
        def test_fails(argstash):
            p = argstash.run([HANG], hooks=["wait_for"], stdout=subprocess.PIPE)
            assert p.stdout.readline() == b"ready\\n"
            bt = argstash.backtrace(p.pid)
            assert any(f.get("function") == "wait_for" for t in bt["threads"] for f in t["frames"])
            assert False, "on purpose"

        def test_passes(argstash):
            p = argstash.run([HANG], hooks=["wait_for"])
        """,
        crash_exe,
        hang_exe,
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert out.count("argstash backtraces") == 1
    assert ": running" in out and "wait_for (fd=7, cookie=24301) [stashed]" in out


def test_plugin_timeout(pytester, crash_exe, hang_exe):
    _inner(
        pytester,
        """
        def test_hangs(argstash):
            p = argstash.run([HANG], hooks=["wait_for"])
            p.wait()
        """,
        crash_exe,
        hang_exe,
    )
    began = time.monotonic()
    result = pytester.runpytest("-p", "no:cacheprovider", "--argstash-timeout", "2")
    assert time.monotonic() - began < 60
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "--argstash-timeout 2 expired" in out
    assert "at the timeout:" in out and "wait_for (fd=7, cookie=24301) [stashed]" in out
    assert "killed by SIGKILL" in out


def _self_backtrace(pytester, crash_exe, hang_exe):
    _inner(
        pytester,
        """
        def test_fails_here(argstash):
            assert False
        """,
        crash_exe,
        hang_exe,
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--argstash-self")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"pytest itself (pid {os.getpid()})" in out
    return out


def test_plugin_self_backtrace(pytester, crash_exe, hang_exe):
    out = _self_backtrace(pytester, crash_exe, hang_exe)
    # Its native frames, named from the interpreter's dynamic symbols on every build.
    assert " Py_RunMain (" in out, out


def test_plugin_self_backtrace_is_mixed(pytester, crash_exe, hang_exe, needs_python_frames):
    out = _self_backtrace(pytester, crash_exe, hang_exe)
    assert "[py] pytest_runtest_makereport" in out, out


def _python_child_crash(pytester, crash_exe, hang_exe):
    # run(python=True) hooks the evaluator (inject --python); only 3.11 is known to
    # have that (3.13+: issue 22). The crash report reads Python frames without it.
    python = sys.version_info[:2] == (3, 11)
    _inner(
        pytester,
        f"""
        import sys

        BOOM = "import ctypes\\ndef boom(depth):\\n    ctypes.string_at(0)\\nboom(4)\\n"

        def test_python_child_crashes(argstash):
            p = argstash.run([sys.executable, "-c", BOOM], python={python})
            assert p.wait() == 0
        """,
        crash_exe,
        hang_exe,
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "got SIGSEGV" in out and "killed by SIGSEGV" in out, out
    return out


def test_plugin_crash_report_of_a_python_child(pytester, crash_exe, hang_exe):
    out = _python_child_crash(pytester, crash_exe, hang_exe)
    assert " Py_RunMain (" in out, out


def test_plugin_crash_report_of_a_python_child_is_mixed(pytester, crash_exe, hang_exe, needs_python_frames):
    out = _python_child_crash(pytester, crash_exe, hang_exe)
    assert "[py] boom (depth=4) at <string>:3" in out, out
    if sys.version_info[:2] == (3, 11):
        assert "_PyEval_EvalFrameDefault" in out, out


def test_plugin_timeout_reads_pytest_itself(pytester, crash_exe, hang_exe, needs_python_frames):
    _inner(
        pytester,
        """
        def test_stuck_waiting(argstash):
            p = argstash.run([HANG], hooks=["wait_for"])
            p.wait()
        """,
        crash_exe,
        hang_exe,
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--argstash-timeout", "2", "--argstash-self")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"pytest itself (pid {os.getpid()}) at the timeout:" in out
    # The test's own frame, with its argument, where it was stuck.
    assert "[py] test_stuck_waiting (argstash=<Argstash object" in out, out
    assert "[py] Process.wait (self=<Process object" in out
