"""Python programs give identical results under the hook: values, exceptions
(tracebacks included), generators, coroutines, deep recursion, threads."""

import pytest

PROGRAMS = {
    "calls": """
        class Point:
            __slots__ = ("x", "y")
            def __init__(self, x, y):
                self.x, self.y = x, y
            def __add__(self, o):
                return Point(self.x + o.x, self.y + o.y)
            @property
            def norm1(self):
                return abs(self.x) + abs(self.y)
            @staticmethod
            def origin():
                return Point(0, 0)
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        def kw(a, b=2, *args, c, d=4, **kws):
            return (a, b, args, c, d, sorted(kws.items()))
        p = Point.origin()
        for i in range(1000):
            p = p + Point(i, -i)
        adders = [lambda x, k=k: x + k for k in range(5)]
        print(fib(22), p.norm1, kw(1, c=3), kw(1, 2, 3, c=5, z=6), [f(10) for f in adders])
        print(sorted({i % 7: i for i in range(100)}.items()), sum(x * x for x in range(1000)))
        print(list(map(str.upper, "abc")), max(range(10), key=lambda v: -v))
    """,
    "exceptions": """
        import traceback
        def thrower(n):
            if n == 0:
                raise ValueError("deep")
            return thrower(n - 1)
        def catcher():
            try:
                thrower(5)
            except ValueError as e:
                raise KeyError("wrapped") from e
        try:
            catcher()
        except KeyError:
            traceback.print_exc()
        def finally_order(log):
            try:
                try:
                    return log.append("body") or "returned"
                finally:
                    log.append("finally")
            except Exception:
                log.append("never")
        log = []
        print(finally_order(log), log)
        try:
            [1][5]
        except IndexError as e:
            print("index", e)
        try:
            exec("x = (")
        except SyntaxError as e:
            print("syntax", e.msg)
        catcher()
    """,
    "generators": """
        def counter(n):
            got = []
            try:
                for i in range(n):
                    v = yield i
                    got.append(v)
            except GeneratorExit:
                print("closed after", got)
                raise
            finally:
                print("finally", got)
        g = counter(10)
        print(next(g), g.send("a"), g.send("b"))
        g.close()
        def inner():
            x = yield 1
            try:
                yield x
            except ValueError as e:
                yield f"caught {e}"
            return "inner done"
        def outer():
            r = yield from inner()
            yield r
        o = outer()
        print(next(o), o.send("sent"), o.throw(ValueError("thrown")), next(o))
        try:
            next(o)
        except StopIteration:
            print("stopped")
        print(sum(i for i in range(10000) if i % 3), list(zip(counter(2), "xy")))
    """,
    "coroutines": """
        import asyncio
        async def leaf(i):
            await asyncio.sleep(0)
            if i == 3:
                raise RuntimeError(f"leaf {i}")
            return i * i
        async def agen(n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i
        async def main():
            results = await asyncio.gather(*(leaf(i) for i in range(6)), return_exceptions=True)
            print([repr(r) for r in results])
            print([x async for x in agen(5)])
            try:
                await asyncio.wait_for(asyncio.sleep(10), 0.01)
            except asyncio.TimeoutError:
                print("timeout")
            return "main done"
        print(asyncio.run(main()))
    """,
    "recursion": """
        import sys
        def down(n):
            return 0 if n == 0 else 1 + down(n - 1)
        print(down(900))
        def forever(n):
            return forever(n + 1)
        try:
            forever(0)
        except RecursionError as e:
            print("recursion error:", str(e)[:40])
        print(down(500))
    """,
    "threads": """
        import threading, queue
        q = queue.Queue()
        def work(i):
            def fib(n):
                return n if n < 2 else fib(n - 1) + fib(n - 2)
            q.put((i, fib(15 + i % 3)))
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        print(sorted(q.get() for _ in ts))
    """,
}

MODES = {
    "startup": ({"ARGSTASH_PEP523": "1"}, ""),
    "install": ({}, "import argstash; argstash.install()\n"),
    "chained": ({}, "import argstash, empty_pep523; empty_pep523.install(); argstash.install()\n"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_same_results_as_unhooked(run_py, name, mode):
    import textwrap

    program = textwrap.dedent(PROGRAMS[name])
    plain = run_py(program, check=False)
    env, prelude = MODES[mode]
    check = "import argstash\nassert argstash.installed()\n"
    hooked = run_py(prelude + check + program, env=env, check=False)
    assert plain.stdout, plain.stderr
    assert (hooked.returncode, hooked.stdout) == (plain.returncode, plain.stdout), hooked.stderr
    # Tracebacks name the same frames; only line numbers of the program shift by the prelude.
    shift = (prelude + check).count("\n")
    import re

    def lines(text, by):
        return re.sub(r'File "<string>", line (\d+)', lambda m: f"line {int(m.group(1)) - by}", text)

    assert lines(hooked.stderr, shift) == lines(plain.stderr, 0)
