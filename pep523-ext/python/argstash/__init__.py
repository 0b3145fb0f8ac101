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

Only CPython 3.11 was tested; importing on anything else raises ImportError.
Any PEP 523 hook makes call-heavy code slower on 3.11 (the interpreter stops
inlining Python-to-Python calls while one is set); see README.md.
"""

import contextlib as _contextlib
import sys as _sys

if _sys.implementation.name != "cpython" or _sys.version_info[:2] != (3, 11):
    raise ImportError(
        "argstash's PEP 523 hook was tested on CPython 3.11 only; this is "
        f"{_sys.implementation.name} {_sys.version.split()[0]}"
    )

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
    backtrace,
    eject,
    inject,
    install,
    installed,
    uninstall,
)


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
