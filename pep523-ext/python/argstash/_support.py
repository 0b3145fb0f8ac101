"""Which interpreters argstash's PEP 523 hook loads on, and why it refuses the others.

Kept apart from the package's ``__init__`` (and free of the native module) so the
refusal logic can be unit-tested with made-up interpreter descriptions: no
free-threaded CPython is packaged where argstash is tested, so that refusal is
only ever exercised that way.
"""

import sys

#: The CPython (major, minor) versions the hook was tested on. 3.12 is not among
#: them: no 3.12 interpreter could be obtained where argstash is tested.
TESTED = ((3, 11), (3, 13), (3, 14), (3, 15))


def _versions():
    return ", ".join(f"{major}.{minor}" for major, minor in TESTED)


def refusal(implementation, version_info, abiflags, gil_disabled):
    """Why argstash must not load on the interpreter described, or None if it may.

    ``implementation`` is ``sys.implementation.name``, ``version_info`` a
    ``(major, minor, micro, ...)`` tuple, ``abiflags`` ``sys.abiflags`` ("" where it
    is missing), ``gil_disabled`` sysconfig's ``Py_GIL_DISABLED`` (None where unset).
    """
    version = ".".join(str(part) for part in version_info[:3])
    if implementation != "cpython":
        return f"argstash's PEP 523 hook is for CPython ({_versions()}); this is {implementation} {version}"
    if "t" in abiflags or gil_disabled:
        # PyObject_HEAD is larger there (so is every offset after it, such as a frame
        # object's f_frame), and the hook would switch the eval function without the
        # GIL's guarantee that no other thread is reading it.
        return (
            f"argstash's PEP 523 hook does not support free-threaded builds of CPython: this "
            f"is CPython {version} built with Py_GIL_DISABLED (abiflags {abiflags!r}); "
            f"use the default (GIL) build of CPython {_versions()}"
        )
    if tuple(version_info[:2]) not in TESTED:
        return f"argstash's PEP 523 hook was tested on CPython {_versions()} only; this is CPython {version}"
    return None


def check():
    """Raises ImportError, saying why, when this interpreter is not one argstash supports."""
    # CPython's configure adds "t" to ABIFLAGS exactly when it defines Py_GIL_DISABLED,
    # so sys.abiflags names a free-threaded build by itself. sysconfig is consulted
    # as well when something already imported it: importing it here would cost the
    # start-up hook 2-9 ms on 3.13-3.15 (measured) for no new information.
    abiflags = getattr(sys, "abiflags", "")
    config = sys.modules.get("sysconfig")
    gil_disabled = None
    if config is not None and "t" not in abiflags:
        try:
            gil_disabled = config.get_config_var("Py_GIL_DISABLED")
        except Exception:  # noqa: BLE001 - a broken sysconfig must not stop the import
            gil_disabled = None
    reason = refusal(sys.implementation.name, tuple(sys.version_info), abiflags, gil_disabled)
    if reason is not None:
        raise ImportError(reason)
