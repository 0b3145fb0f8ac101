"""install / uninstall / installed / hooked: semantics, arena, refusal of bad calls."""


def test_install_uninstall_restores_the_default(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c
        default = c.default_address()
        assert c.current() == default and not argstash.installed()
        assert argstash._hook_info() is None
        assert argstash.install() is True
        assert argstash.installed()
        info = argstash._hook_info()
        assert c.current() == info["trampoline"] != default
        assert info["target"] == default and info["previous"] == default
        assert info["target_name"] == "_PyEval_EvalFrameDefault"
        assert info["state"] == "active"
        assert argstash.install() is False, "second install reports it already was"
        assert argstash.uninstall() is None
        assert not argstash.installed()
        assert c.current() == default
        assert argstash._hook_info()["state"] == "ejected"
        """
    )


def test_uninstall_without_install_is_a_clear_error_and_changes_nothing(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c
        before = c.current()
        for _ in range(2):
            try:
                argstash.uninstall()
            except RuntimeError as e:
                assert "not installed" in str(e) and "nothing changed" in str(e), e
            else:
                raise AssertionError("uninstall() without install() did not raise")
            assert c.current() == before
            argstash.install(); argstash.uninstall()
        """
    )


def test_hooked_context_manager(run_py):
    run_py(
        """
        import argstash
        with argstash.hooked():
            assert argstash.installed()
            with argstash.hooked():
                assert argstash.installed()
            assert argstash.installed(), "the inner block did not install, so it must not uninstall"
        assert not argstash.installed()

        argstash.install()
        with argstash.hooked():
            pass
        assert argstash.installed(), "hooked() must leave a hook it did not install"
        argstash.uninstall()

        try:
            with argstash.hooked():
                raise KeyError("inside")
        except KeyError as e:
            assert e.args == ("inside",)
        assert not argstash.installed()
        """
    )


def test_cycles_reuse_one_arena_that_stays_mapped_and_is_never_writable_and_executable(run_py):
    run_py(
        """
        import argstash
        def anon_exec_maps():
            out = []
            for line in open("/proc/self/maps"):
                f = line.split()
                if len(f) == 5 and "x" in f[1]:
                    out.append((int(f[0].split("-")[0], 16), int(f[0].split("-")[1], 16), f[1]))
            return out
        for _ in range(50):
            argstash.install()
            argstash.uninstall()
        info = argstash._hook_info()
        assert info["arenas"] == 1, info
        # Uninstalled, the arena is still mapped r-x (a live frame may return into it).
        maps = anon_exec_maps()
        mine = [m for m in maps if m[0] <= info["trampoline"] < m[1]]
        assert mine and mine[0][2] == "r-xp", maps
        assert mine[0][0] == info["arena"], "the arena starts its own mapping (readers find it there)"
        for line in open("/proc/self/maps"):
            assert "wx" not in line.split()[1], line
        """
    )


def test_this_version_is_tested_and_the_module_was_built_for_it():
    import sys
    import sysconfig

    import argstash
    from argstash import _support

    assert sys.version_info[:2] in _support.TESTED
    assert [tuple(v) for v in argstash.TESTED_VERSIONS] == list(_support.TESTED)
    # One build per minor version: the loaded file carries this interpreter's tag.
    assert argstash._native.__file__.endswith(sysconfig.get_config_var("EXT_SUFFIX"))


def test_import_refuses_an_untested_version(run_py):
    p = run_py(
        """
        import sys
        sys.version_info = (3, 12, 0, "final", 0)
        try:
            import argstash
        except ImportError as e:
            print(e)
        else:
            raise AssertionError("imported on a faked 3.12")
        """
    )
    assert "tested on CPython 3.11, 3.13, 3.14, 3.15 only; this is CPython 3.12.0" in p.stdout


# Free-threaded CPython: no such build is packaged where this runs, so the refusal is
# tested on descriptions of one (the decision function) and on a faked sys.abiflags.


def test_free_threaded_builds_are_refused_by_name():
    from argstash._support import refusal

    for abiflags, gil_disabled in (("t", 1), ("t", None), ("", 1), ("td", 1)):
        reason = refusal("cpython", (3, 14, 2, "final", 0), abiflags, gil_disabled)
        assert reason is not None, (abiflags, gil_disabled)
        assert "free-threaded" in reason and "Py_GIL_DISABLED" in reason and "3.14.2" in reason, reason
        assert f"abiflags {abiflags!r}" in reason, reason
    # The default build of each tested version is accepted, with or without abiflags.
    for version in ((3, 11, 2), (3, 13, 18), (3, 14, 10), (3, 15, 2)):
        for abiflags, gil_disabled in (("", None), ("", 0), ("d", 0)):
            assert refusal("cpython", version, abiflags, gil_disabled) is None, (version, abiflags)
    # A free-threaded 3.12 or 3.16 is named as free-threaded first (the more basic reason).
    assert "free-threaded" in refusal("cpython", (3, 16, 0), "t", 1)
    assert "this is pypy 3.11.0" in refusal("pypy", (3, 11, 0), "", None)


def test_import_refuses_a_free_threaded_build(run_py):
    p = run_py(
        """
        import sys
        sys.abiflags = "t"
        try:
            import argstash
        except ImportError as e:
            print(e)
        else:
            raise AssertionError("imported on a faked free-threaded build")
        assert "argstash._native" not in sys.modules, "refused before loading the native module"
        """
    )
    assert "does not support free-threaded builds of CPython" in p.stdout, p.stdout
    assert "Py_GIL_DISABLED (abiflags 't')" in p.stdout, p.stdout
