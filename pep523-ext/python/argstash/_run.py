"""``argstash.run``: start a command with hooks in place, as ``argstash run`` does.

The command runs under a supervisor thread of this process (argstash's Rust
library), which is its tracer: hooks go in before its ``main``, and when a fatal
signal is about to kill it every thread's stack is read first (``reports()``).
The object returned looks like ``subprocess.Popen``.
"""

import os
import signal as _signal
import subprocess
import threading
import weakref

from . import _native

# Commands started by run() in this process, by pid: their supervisor thread is
# their tracer, so argstash.backtrace() reads them through it.
_LIVE = weakref.WeakValueDictionary()

# Popen keyword arguments run() understands; any other is refused by name.
_KNOWN = {"stdin", "stdout", "stderr", "env", "cwd", "text", "universal_newlines", "encoding", "errors", "bufsize"}


class Process:
    """A command started by :func:`run` (``subprocess.Popen``-like).

    ``pid``, ``args``, ``returncode``, ``stdin``/``stdout``/``stderr`` (file objects
    when ``PIPE`` was asked), ``wait()``, ``poll()``, ``communicate()``,
    ``send_signal()``, ``terminate()``, ``kill()``, plus ``hooks`` (the functions
    hooked), ``backtrace(text=False)`` (every thread's stack now) and
    ``reports()`` (stacks the supervisor took, e.g. when the command crashed).
    """

    def __init__(self, native, args, stdin, stdout, stderr):
        self._native = native
        self._reports = []
        self._lock = threading.Lock()
        self.args = args
        self.pid = native.pid
        self.hooks = native.hooks
        self.returncode = None
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr

    def __repr__(self):
        return f"<argstash.Process pid={self.pid} returncode={self.returncode} args={self.args!r}>"

    def poll(self):
        """The returncode if the command has ended (minus the signal that killed it), else None."""
        if self.returncode is None:
            self.returncode = self._native.poll()
        return self.returncode

    def wait(self, timeout=None):
        """Waits for the command to end; raises subprocess.TimeoutExpired after ``timeout`` seconds."""
        if self.returncode is None:
            code = self._native.wait(timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = code
        return self.returncode

    def communicate(self, input=None, timeout=None):
        """Sends ``input``, reads stdout and stderr to their end, waits; returns (stdout, stderr)."""
        results = {}

        def drain(name, f):
            results[name] = f.read()
            f.close()

        threads = [
            threading.Thread(target=drain, args=(name, f), daemon=True)
            for name, f in (("stdout", self.stdout), ("stderr", self.stderr))
            if f is not None
        ]
        for t in threads:
            t.start()
        if self.stdin is not None:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        for t in threads:
            t.join(timeout)
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        return results.get("stdout"), results.get("stderr")

    def send_signal(self, sig):
        """Sends ``sig`` to the command (never to a reused pid)."""
        self._native.send_signal(int(sig))

    def terminate(self):
        """Sends SIGTERM."""
        self.send_signal(_signal.SIGTERM)

    def kill(self):
        """Sends SIGKILL."""
        self.send_signal(_signal.SIGKILL)

    def backtrace(self, text=False):
        """Every thread's stack now, read by the supervisor: the ``bt --json`` dict, or ``bt``'s text."""
        return self._native.backtrace(text=text)

    def reports(self):
        """Every report the supervisor took so far (a crash: each thread's stack before the
        fatal signal took effect), oldest first, as dicts: ``reason`` ("crash", "signal",
        "requested", "exec"), ``pid``, ``signal``, ``tid``, ``text``, ``backtrace``, ``error``."""
        with self._lock:
            self._reports.extend(self._native.take_reports())
            return list(self._reports)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in (self.stdin, self.stdout, self.stderr):
            if f is not None:
                f.close()
        self.wait()


def _child_fd(spec, name, to_close, pipe_for_stdout):
    """The descriptor the child gets for one stream (None: inherited), and the parent's end."""
    if spec is None:
        return None, None
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        if name == "stdin":
            to_close.append(r)
            return r, w
        to_close.append(w)
        return w, r
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        to_close.append(fd)
        return fd, None
    if spec == subprocess.STDOUT:
        if name != "stderr":
            raise ValueError("STDOUT is only valid for stderr")
        # Where stdout goes: its pipe or descriptor, else this process's stdout.
        return (1 if pipe_for_stdout is None else pipe_for_stdout), None
    if isinstance(spec, int):
        return spec, None
    if hasattr(spec, "fileno"):
        return spec.fileno(), None
    raise TypeError(f"{name}={spec!r}: give None, PIPE, DEVNULL, a file descriptor or a file object")


def run(argv, hooks=(), *, stack_args=None, float_args=False, python=False, on_crash=True, **popen_kwargs):
    """Starts ``argv`` with ``hooks`` hooked before its ``main`` (as ``argstash run``).

    ``hooks`` are function names (``"foo"``, ``"libm.so.6!cos"``, ``"foo(int a)"``)
    or entry addresses; ``python=True`` also hooks CPython's frame evaluator.
    Popen keyword arguments: stdin, stdout, stderr (None, PIPE, DEVNULL, STDOUT for
    stderr, a descriptor or file object), env, cwd, text/universal_newlines,
    encoding, errors, bufsize. Returns a :class:`Process`.
    """
    unknown = sorted(set(popen_kwargs) - _KNOWN)
    if unknown:
        raise TypeError(f"argstash.run() does not support Popen argument(s): {', '.join(unknown)}")
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    argv = [os.fsdecode(a) for a in argv]
    if isinstance(hooks, str):
        hooks = [hooks]
    text = bool(
        popen_kwargs.get("text") or popen_kwargs.get("universal_newlines") or popen_kwargs.get("encoding") or popen_kwargs.get("errors")
    )
    env = popen_kwargs.get("env")
    cwd = popen_kwargs.get("cwd")
    to_close, parents = [], {}
    try:
        fds = {}
        for name in ("stdin", "stdout", "stderr"):
            fds[name], parents[name] = _child_fd(popen_kwargs.get(name), name, to_close, fds.get("stdout"))
        native = _native._spawn(
            list(argv),
            list(hooks),
            stack_args=stack_args,
            float_args=float_args,
            python=python,
            on_crash=on_crash,
            env=None if env is None else [(os.fsdecode(k), os.fsdecode(v)) for k, v in env.items()],
            cwd=None if cwd is None else os.fsdecode(cwd),
            stdin=fds["stdin"],
            stdout=fds["stdout"],
            stderr=fds["stderr"],
        )
    except BaseException:
        for fd in parents.values():
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in to_close:
            os.close(fd)
    bufsize = popen_kwargs.get("bufsize", -1)
    files = {}
    for name, fd in parents.items():
        if fd is None:
            files[name] = None
            continue
        mode = "wb" if name == "stdin" else "rb"
        f = open(fd, mode, buffering=bufsize)
        if text:
            import io

            f = io.TextIOWrapper(
                f,
                encoding=popen_kwargs.get("encoding"),
                errors=popen_kwargs.get("errors"),
                write_through=name == "stdin",
            )
        files[name] = f
    proc = Process(native, argv, files["stdin"], files["stdout"], files["stderr"])
    _LIVE[proc.pid] = proc
    return proc


def running(pid):
    """The :class:`Process` run() started in this process with this pid, if it still runs."""
    proc = _LIVE.get(pid)
    if proc is not None and proc.poll() is None:
        return proc
    return None
