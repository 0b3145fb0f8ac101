"""argstash for Python: stash frames for every frame evaluation (PEP 523).

``argstash.install()`` makes the interpreter's frame-evaluation function an
argstash stash trampoline: each eval call's ``tstate``, ``frame`` and
``throwflag`` sit in a stash frame that ``argstash bt --pid PID`` reads from
outside, like any function hooked with ``argstash inject``.

    import argstash
    argstash.install()          # True: installed; False: it already was
    argstash.installed()        # True
    argstash.uninstall()        # the previous function is back
    with argstash.hooked():     # installed inside the block only
        ...

It also drives argstash's library on other processes, with no CLI involved:

    argstash.inject(pid, ["bar"], stack_args=None, float_args=False, python=False)
    argstash.backtrace(pid)            # the `argstash bt --json` dict (text=True: bt's text)
    argstash.eject(pid)                # every hook (or eject(pid, ["bar"]))
    p = argstash.run(["./prog"], hooks=["bar"], stdout=subprocess.PIPE)
    p.wait(); p.reports()              # stacks taken when it crashed, if it did

Failures raise argstash.Error (subclasses per kind: NoSuchProcess, NotPermitted,
AlreadyHooked, NotHooked, SymbolNotFound, ...) with the command line's messages.
The pytest plugin (argstash.pytest_plugin) is registered by the wheel.

Tested on CPython 3.11, 3.13, 3.14 and 3.15 (default GIL builds, one build of
the native module per version); importing on anything else, free-threaded builds
included, raises ImportError saying why (argstash._support). Any PEP 523 hook
makes call-heavy code slower (on 3.11 the interpreter stops inlining
Python-to-Python calls while one is set); see README.md.
"""

import contextlib as _contextlib
import sys as _sys

from . import _support

# Before the native module: on an interpreter it was not built for, its import would
# fail with a loader message (or, on a free-threaded build, not be found at all).
_support.check()

from . import _native  # noqa: E402
from ._native import (  # noqa: E402
    TESTED_VERSIONS,
    AlreadyHooked,
    AmbiguousSymbol,
    CannotHook,
    CommandNotFound,
    Error,
    NoSuchProcess,
    NotExecutable,
    NotHooked,
    NotPermitted,
    NotPython,
    ProcessExited,
    SymbolNotFound,
    _frame_address,
    _hook_info,
    install,
    installed,
    uninstall,
)


def _ours(pid):
    """A command run() started in this process with `pid`, still running (its supervisor traces it)."""
    run_module = _sys.modules.get("argstash._run")
    return run_module.running(pid) if run_module is not None else None


def _refuse_ours(pid, what):
    raise NotPermitted(
        f"process {pid} was started by argstash.run() in this process and is traced by its "
        f"supervisor thread, so it cannot be attached to for {what}: give the functions to "
        "run(hooks=[...]) when starting it"
    )


def inject(pid, funcs, *, stack_args=None, float_args=False, python=False):
    """Hooks ``funcs`` (names, ``MODULE!NAME``, ``name(signature)`` or addresses) in process
    ``pid``, as ``argstash inject``; returns the names hooked."""
    if _ours(pid) is not None:
        _refuse_ours(pid, "inject")
    return _native.inject(pid, funcs, stack_args=stack_args, float_args=float_args, python=python)


def eject(pid, funcs=None, *, python=False):
    """Removes the hooks of ``funcs`` (every hook when None) from process ``pid``, as
    ``argstash eject``; returns how many were removed."""
    if _ours(pid) is not None:
        _refuse_ours(pid, "eject")
    return _native.eject(pid, funcs, python=python)


def backtrace(pid, *, text=False):
    """Every thread's stack of process ``pid``: the ``argstash bt --json`` dict, or with
    ``text=True`` the text ``argstash bt`` prints. A command run() started is read
    through its supervisor."""
    proc = _ours(pid)
    if proc is not None:
        return proc.backtrace(text=text)
    return _native.backtrace(pid, text=text)


def run(argv, hooks=(), **kwargs):
    """Starts ``argv`` with ``hooks`` hooked before its ``main``; see ``argstash._run.run``."""
    from ._run import run as _run

    return _run(argv, hooks, **kwargs)


def __getattr__(name):
    # `Process` lives in _run, imported on first use: `import argstash` (run by the
    # start-up hook in every interpreter) stays free of subprocess and threading.
    if name == "Process":
        from ._run import Process

        return Process
    raise AttributeError(f"module 'argstash' has no attribute {name!r}")


__all__ = [
    "install",
    "uninstall",
    "installed",
    "hooked",
    "TESTED_VERSIONS",
    "inject",
    "eject",
    "backtrace",
    "run",
    "Process",
    "Error",
    "NoSuchProcess",
    "NotPermitted",
    "ProcessExited",
    "AlreadyHooked",
    "NotHooked",
    "SymbolNotFound",
    "AmbiguousSymbol",
    "NotPython",
    "CannotHook",
    "CommandNotFound",
    "NotExecutable",
]


@_contextlib.contextmanager
def hooked():
    """Install argstash's hook for the duration of the block.

    Nested blocks and an already installed hook are fine: only the block that
    installed it uninstalls it on exit.
    """
    installed_here = install()
    try:
        yield
    finally:
        if installed_here:
            uninstall()
