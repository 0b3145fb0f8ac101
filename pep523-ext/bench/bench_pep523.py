#!/usr/bin/env python3
"""Cost of frame-evaluation hooks on call-heavy Python: unhooked vs argstash's native
hook vs the argstash extension vs an empty C PEP 523 hook.

Each measurement runs in a fresh interpreter (the one running this script, or
--python), modes interleaved round by round in one run so that machine noise
hits them alike:

    unhooked   no hook
    native     `argstash inject --pid <self> --python`, run by the measuring
               process itself in a child before its timed runs (the child
               detaches when it is done; the process checks that it is not
               traced while it measures), `argstash eject --python` after them;
               the other modes run `argstash list --pid <self>` instead, so
               that every child has forked and waited alike
    argstash   argstash.install() (the extension's stash trampoline, calling the default)
    empty_c    tests/fixtures/python/empty_pep523.c: an empty C hook calling the default

Workloads: recursive fib (function calls) and a method-call loop. Each child
warms up once (after its hook is set) and reports the best of --repeat runs, in
CPU time of its thread (time.thread_time: time spent descheduled on a busy
machine does not count, the cost of sharing caches with other work still
does); the table shows, per mode, the median and the minimum over rounds and
the overhead against unhooked; the last column is argstash minus empty_c in
percentage points (target: at most 3; native's target: at most +3%).

    python pep523-ext/bench/bench_pep523.py [--rounds 15] [--repeat 3] [--python PATH]
        [--wheel argstash-*.whl] [--argstash target/release/argstash] [--json]

Needs the argstash module (installed in the interpreter, or --wheel: unpacked
into a temporary directory for the children), the argstash binary for `native`
(skipped with a note when it is missing) and a C compiler.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE_C = REPO / "tests" / "fixtures" / "python" / "empty_pep523.c"

CHILD = r"""
import os, sys, time
mode, workload, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

class Counter:
    def __init__(self):
        self.k = 1
    def step(self, x):
        return x + self.k

def methods(n):
    c = Counter()
    acc = 0
    for _ in range(n):
        acc = c.step(acc)
    return acc

def run():
    if workload == "fib":
        return fib(25)
    return methods(300_000)

def argstash_cli(*args):
    import os, subprocess
    out = subprocess.run([sys.argv[4], *args, "--pid", str(os.getpid())], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("argstash %s: %s" % (" ".join(args), out.stderr.strip()))
    return out.stdout

def traced():
    with open("/proc/self/status") as f:
        return next(l for l in f if l.startswith("TracerPid:")).split()[1] != "0"

if mode == "argstash":
    import argstash
    assert argstash.install()
elif mode == "empty_c":
    import empty_pep523
    assert empty_pep523.install()
elif mode == "native":
    assert "hooked _PyEval_EvalFrameDefault" in argstash_cli("inject", "--python")
    assert not traced(), "still traced after inject"
if mode != "native" and os.access(sys.argv[4], os.X_OK):
    # The same fork and exec as native's inject, so that only the hook differs.
    argstash_cli("list")
run()
best = float("inf")
for _ in range(repeat):
    t = time.thread_time()
    run()
    best = min(best, time.thread_time() - t)
if mode == "native":
    assert not traced(), "traced while measuring"
    argstash_cli("eject", "--python")
print(best)
"""

MODES = ["unhooked", "native", "argstash", "empty_c"]
WORKLOADS = ["fib", "methods"]


def build_fixture(python: str, out: Path) -> None:
    """Compiles the empty C hook for `python` into `out`."""
    query = "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"
    include, suffix = subprocess.run([python, "-c", query], check=True, capture_output=True, text=True).stdout.split()
    subprocess.run(
        [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", f"-I{include}", str(FIXTURE_C), "-o", str(out / f"empty_pep523{suffix}")],
        check=True,
    )


def measure(python: str, path: str, argstash: str, mode: str, workload: str, repeat: int) -> float:
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("ARGSTASH_PEP523", None)
    out = subprocess.run([python, "-c", CHILD, mode, workload, str(repeat), argstash], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{mode}/{workload} failed: {out.stderr.strip()}")
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter to measure (default: this one)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--wheel", help="an argstash wheel to unpack for the children (default: the installed module)")
    ap.add_argument("--argstash", default=str(REPO / "target" / "release" / "argstash"), help="the argstash binary (native mode)")
    ap.add_argument("--json", action="store_true", help="print the raw samples as JSON too")
    args = ap.parse_args()
    modes = list(MODES)
    if not os.access(args.argstash, os.X_OK):
        print(f"note: no argstash binary at {args.argstash}: native mode skipped (cargo build --release -p argstash)")
        modes.remove("native")

    version = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0], sys.executable)"], check=True, capture_output=True, text=True
    ).stdout.strip()
    samples = {(w, m): [] for w in WORKLOADS for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        build_fixture(args.python, Path(tmp))
        path = [tmp]
        if args.wheel:
            ext = Path(tmp) / "ext"
            with zipfile.ZipFile(args.wheel) as whl:
                whl.extractall(ext)
            path.append(str(ext))
        for r in range(args.rounds):
            # Rotate the order each round so that no mode always runs first.
            order = modes[r % len(modes):] + modes[: r % len(modes)]
            for w in WORKLOADS:
                for m in order:
                    samples[(w, m)].append(measure(args.python, os.pathsep.join(path), args.argstash, m, w, args.repeat))

    print(f"python {version}; {args.rounds} rounds, best of {args.repeat} per child (thread CPU time)")
    head = f"{'workload':16} {'unhooked':>12}" + "".join(f" {m:>18}" for m in modes[1:]) + f" {'argstash-empty_c':>18}"
    print(head)
    for stat, pick in (("median", statistics.median), ("min", min)):
        for w in WORKLOADS:
            t = {m: pick(samples[(w, m)]) for m in modes}
            over = {m: 100.0 * (t[m] / t["unhooked"] - 1.0) for m in modes}
            row = f"{w + ' ' + stat:16} {t['unhooked'] * 1e3:9.2f} ms"
            row += "".join(f" {t[m] * 1e3:9.2f} ms {over[m]:+5.1f}%" for m in modes[1:])
            row += f" {over['argstash'] - over['empty_c']:+15.1f} pt"
            print(row)
    if args.json:
        print(json.dumps({f"{w}/{m}": v for (w, m), v in samples.items()}))


if __name__ == "__main__":
    main()
