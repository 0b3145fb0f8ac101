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
    _frame_address,
    _hook_info,
    install,
    installed,
    uninstall,
)

__all__ = ["install", "uninstall", "installed", "hooked", "TESTED_VERSIONS"]


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
