"""pytest plugin (registered by the wheel's ``pytest11`` entry point).

The ``argstash`` fixture starts processes with hooks in place and reads their
stacks. When a test that used it fails, when a process it started crashes, or
when ``--argstash-timeout SECS`` expires, the test's report gets a section
``argstash backtraces``: every thread's mixed native/Python stack, with stashed
arguments, of every process started through the fixture (on a timeout, the
stacks are read first, then the processes are killed). With ``--argstash-self``
the section also holds the pytest process's own stacks (at the timeout, while
the test's frames are on them; else when the failure is reported), read by a
helper process it allows in with ``PR_SET_PTRACER``.
"""

import ctypes
import os
import signal
import subprocess
import sys
import threading

import pytest

_FIXTURE = pytest.StashKey["Argstash"]()
SECTION = "argstash backtraces"
_PR_SET_PTRACER = 0x59616D61


def pytest_addoption(parser):
    group = parser.getgroup("argstash", "argstash backtraces of native test processes")
    group.addoption(
        "--argstash-timeout",
        type=float,
        default=None,
        metavar="SECS",
        help="when a test using the argstash fixture runs longer than SECS, record the "
        "backtraces of the processes it started, kill them and fail the test",
    )
    group.addoption(
        "--argstash-self",
        action="store_true",
        default=False,
        help="when a test using the argstash fixture fails, also record the pytest "
        "process's own backtraces (read by a helper process allowed in with PR_SET_PTRACER)",
    )


def _describe(returncode):
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class Argstash:
    """The ``argstash`` fixture: processes started with hooks, and their stacks."""

    def __init__(self, timeout=None, read_self=False):
        self.processes = []
        self.timeout = timeout
        self.read_self = read_self
        self.self_at_timeout = None  # pytest's own stacks at the timeout (--argstash-self)
        self.timed_out = False
        self._snapshots = {}  # pid -> backtrace text taken on timeout
        self._timer = None
        self._lock = threading.Lock()
        if timeout is not None:
            self._timer = threading.Timer(timeout, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def run(self, argv, hooks=(), **kwargs):
        """Starts ``argv`` with ``hooks`` (see ``argstash.run``); the process is reported on failure."""
        import argstash

        p = argstash.run(argv, hooks, **kwargs)
        with self._lock:
            self.processes.append(p)
        return p

    def inject(self, pid, funcs, **options):
        """Hooks ``funcs`` in a running process (``argstash.inject``)."""
        import argstash

        return argstash.inject(pid, funcs, **options)

    def eject(self, pid, funcs=None, **options):
        """Removes hooks (``argstash.eject``)."""
        import argstash

        return argstash.eject(pid, funcs, **options)

    def backtrace(self, pid, text=False):
        """Every thread's stack of ``pid`` (``argstash.backtrace``): a dict, or text."""
        import argstash

        return argstash.backtrace(pid, text=text)

    def crashes(self):
        """The crash reports of every process started through the fixture."""
        return [r for p in self.processes for r in p.reports() if r["reason"] == "crash"]

    def _expire(self):
        with self._lock:
            processes = list(self.processes)
            self.timed_out = True
        if self.read_self:
            # The test's own frames are still on pytest's stack: read them first.
            self.self_at_timeout = _self_backtrace()
        for p in processes:
            if p.poll() is None:
                self._snapshots[p.pid] = _live_text(p)
                p.kill()

    def _stop(self):
        if self._timer is not None:
            self._timer.cancel()

    def section(self, live):
        """The report section: each process's state, crash reports, and (``live``) current stacks."""
        parts = []
        if self.timed_out:
            parts.append(
                f"--argstash-timeout {self.timeout:g} expired: backtraces taken, then the processes were killed"
            )
        for p in self.processes:
            head = f"process {p.pid} ({' '.join(p.args)}): "
            body = []
            for r in p.reports():
                if r["reason"] == "crash":
                    sig = _signame(r["signal"])
                    if r["text"] is not None:
                        body.append(f"crashed: thread {r['tid']} got {sig}; every thread before it died:\n{r['text']}")
                    else:
                        body.append(f"crashed: thread {r['tid']} got {sig}; stacks unreadable: {r['error']}")
                elif r["reason"] == "exec":
                    body.append(f"exec'd {r['program']}: its hooks are gone")
            if p.pid in self._snapshots:
                body.append(f"at the timeout:\n{self._snapshots[p.pid]}")
            code = p.poll()
            if code is None and live:
                body.append(_live_text(p))
            if code == -signal.SIGKILL and not body:
                body.append("killed by SIGKILL: no report is possible")
            parts.append(head + _describe(code) + "".join("\n" + b for b in body))
        return "\n\n".join(parts)


def _signame(sig):
    try:
        return signal.Signals(sig).name
    except (ValueError, TypeError):
        return f"signal {sig}"


def _live_text(p):
    try:
        return p.backtrace(text=True)
    except Exception as e:  # noqa: BLE001 - a report must never break the report
        return f"(stacks unreadable: {e})"


def _self_backtrace():
    """The pytest process's own stacks, read by a helper it allows in with PR_SET_PTRACER."""
    code = (
        "import sys, argstash\n"
        "sys.stdin.readline()\n"
        "print(argstash.backtrace(int(sys.argv[1]), text=True), end='')\n"
    )
    helper = subprocess.Popen(
        [sys.executable, "-c", code, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        # Harmless where Yama is absent or ptrace_scope is 0; needed where it is 1.
        libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(helper.pid), 0, 0, 0)
        out, _ = helper.communicate("go\n", timeout=60)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()
        return "(the helper reading this process timed out)"
    finally:
        libc.prctl(_PR_SET_PTRACER, 0, 0, 0, 0)
    if helper.returncode != 0:
        return f"(the helper could not read this process: {out.strip()})"
    return out


@pytest.fixture()
def argstash(request):
    """Starts processes with argstash hooks (``.run``), hooks (``.inject``) and reads
    stacks (``.backtrace``); they are reported in ``argstash backtraces`` when the test
    fails, one crashes or ``--argstash-timeout`` expires, and killed at teardown."""
    fixture = Argstash(
        timeout=request.config.getoption("argstash_timeout"),
        read_self=request.config.getoption("argstash_self"),
    )
    request.node.stash[_FIXTURE] = fixture
    yield fixture
    fixture._stop()
    for p in fixture.processes:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    fixture = item.stash.get(_FIXTURE, None)
    if fixture is None or report.when != "call":
        return
    if fixture.timed_out and report.passed:
        report.outcome = "failed"
        report.longrepr = f"argstash: --argstash-timeout {fixture.timeout:g} expired"
    crashed = bool(fixture.crashes())
    if report.failed or crashed or fixture.timed_out:
        text = fixture.section(live=report.failed)
        if fixture.self_at_timeout is not None:
            text += f"\n\npytest itself (pid {os.getpid()}) at the timeout:\n{fixture.self_at_timeout}"
        elif report.failed and fixture.read_self:
            text += f"\n\npytest itself (pid {os.getpid()}):\n{_self_backtrace()}"
        report.sections.append((SECTION, text))
