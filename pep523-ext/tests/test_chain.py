"""Chaining with another tool's PEP 523 hook (the C fixture empty_pep523)."""


def test_hook_set_before_ours_is_called_and_put_back(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        assert c.install()
        assert argstash.install()
        info = argstash._hook_info()
        assert info["previous"] == info["target"] == c.address()
        assert info["target_name"] == "empty_eval", info
        before = c.calls()
        assert fib(15) == 610
        # Every eval call went through our trampoline into the C hook: 1973 calls of fib.
        assert c.calls() - before >= 1973, c.calls() - before
        argstash.uninstall()
        assert c.installed() and c.current() == c.address()
        c.uninstall()
        assert c.current() == c.default_address()
        """
    )


def test_hook_set_over_ours_blocks_uninstall_without_changing_anything(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c
        argstash.install()
        ours = argstash._hook_info()["trampoline"]
        assert c.install()
        assert not argstash.installed(), "ours is no longer the current function"
        for call in (argstash.uninstall, argstash.install):
            try:
                call()
            except RuntimeError as e:
                assert "empty_eval" in str(e) and "nothing changed" in str(e), e
            else:
                raise AssertionError(f"{call.__name__}() did not raise")
            assert c.current() == c.address()
            assert argstash._hook_info()["state"] == "active"
        # Both still run: the C hook calls ours, which calls the default.
        def f(n):
            return 0 if n == 0 else 1 + f(n - 1)
        before = c.calls()
        assert f(100) == 100 and c.calls() - before >= 101
        # Once the later tool is gone, ours uninstalls normally.
        c.uninstall()
        assert c.current() == ours and argstash.installed()
        argstash.uninstall()
        assert c.current() == c.default_address()
        """
    )


def test_frame_address_matches_the_interpreters_own_struct(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c, sys
        def inner():
            return sys._getframe()
        f = sys._getframe()
        assert argstash._frame_address(f) == c.frame_address(f) != 0
        g = inner()
        assert argstash._frame_address(g) == c.frame_address(g)
        try:
            argstash._frame_address(42)
        except TypeError:
            pass
        else:
            raise AssertionError("a non-frame was accepted")
        """
    )
