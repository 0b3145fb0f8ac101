"""Threads started before and after install, install from another thread, fork.

The C hook is installed first, below ours, so its call counter proves that eval
calls of a given thread really went through our trampoline (which calls it).
"""


def test_threads_started_before_and_after_install_are_hooked(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c, threading
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        go = threading.Event()
        results = {}
        def worker(name):
            go.wait()
            results[name] = fib(18)
        early = [threading.Thread(target=worker, args=(f"early{i}",)) for i in range(4)]
        for t in early:
            t.start()
        c.install()
        assert argstash.install()
        late = [threading.Thread(target=worker, args=(f"late{i}",)) for i in range(4)]
        for t in late:
            t.start()
        before = c.calls()
        go.set()
        for t in early + late:
            t.join()
        assert results == {n: 2584 for n in results} and len(results) == 8, results
        assert c.calls() - before >= 8 * 8361, c.calls() - before
        argstash.uninstall()
        c.uninstall()
        """
    )


def test_install_and_uninstall_from_other_threads(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c, threading
        out = []
        t = threading.Thread(target=lambda: out.append(argstash.install()))
        t.start(); t.join()
        assert out == [True] and argstash.installed()
        assert c.current() == argstash._hook_info()["trampoline"]
        def f(n):
            return 0 if n == 0 else 1 + f(n - 1)
        assert f(200) == 200
        t = threading.Thread(target=argstash.uninstall)
        t.start(); t.join()
        assert not argstash.installed() and c.current() == c.default_address()
        """
    )


def test_fork_keeps_the_hook_in_both_processes(run_py):
    run_py(
        """
        import argstash, empty_pep523 as c, os, threading
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        c.install()
        argstash.install()
        # A busy thread at fork time: the child must not inherit anything locked.
        stop = threading.Event()
        busy = threading.Thread(target=lambda: [fib(10) for _ in iter(stop.is_set, True)])
        busy.start()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert argstash.installed()
                before = c.calls()
                assert fib(16) == 987 and c.calls() - before >= 3193
                argstash.uninstall()
                assert not argstash.installed() and c.current() == c.address()
                assert argstash.install() and argstash._hook_info()["arenas"] == 1
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        stop.set(); busy.join()
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert argstash.installed(), "the child's uninstall must not touch the parent"
        assert fib(16) == 987
        argstash.uninstall()
        c.uninstall()
        """
    )
