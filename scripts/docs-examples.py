#!/usr/bin/env python3
"""Run the documented examples and check (or rewrite) their output blocks.

An example block is a fenced block right after a marker line:

    <!-- docs-example: NAME [ARG ...] -->
    ```
    ...output of the current build...
    ```

Only marked blocks are run; every other block is prose. NAME picks one of the
generators below, each of which runs real commands of the current build
(against the bundled demo target, docs/examples/, or the CLI's own --help) and
returns the transcript.

    scripts/docs-examples.py --check     # exit 1 and show a diff where a block is stale
    scripts/docs-examples.py --write     # rewrite the blocks with fresh output

What changes from run to run is normalised before comparing (both sides):
addresses, pids and tids, timings, paths under /tmp, the leftover registers
rdx, rcx, r8 and r9 (and i386 eax and stack words past stack+4) of hooked
frames (the examples' functions take fewer arguments), and the parameter values of unhooked frames (DWARF recovers more of
them when a thread is read stopped). --write stores the
output as it came, so the docs show a real run.
"""

import argparse
import difflib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^(?P<indent>[ \t]*)<!-- docs-example: (?P<spec>[^>]*?) -->[ \t]*$")
# clap wraps help text to the terminal; a fixed width keeps it the same everywhere.
ENV = dict(os.environ, COLUMNS="100", NO_COLOR="1", LC_ALL="C.UTF-8")


class ExampleError(Exception):
    """An example could not be produced (names the example and the cause)."""


class Ctx:
    """What the generators share: the argstash binary and a scratch directory."""

    def __init__(self, argstash: Path, scratch: Path):
        self.argstash = argstash
        self.scratch = scratch
        self.children: list[subprocess.Popen] = []

    def argstash_run(self, args: list[str], *, cwd=None, ok_codes=(0,)) -> str:
        """`argstash ARGS` with stdout and stderr merged, as a terminal shows them."""
        p = subprocess.run(
            [str(self.argstash), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=ENV,
            cwd=cwd or ROOT,
            timeout=120,
        )
        if p.returncode not in ok_codes:
            raise ExampleError(f"argstash {' '.join(args)} exited {p.returncode}:\n{p.stdout}")
        return p.stdout

    def cc(self, source: Path, name: str, *flags: str) -> Path:
        """Compiles a C file into the scratch directory."""
        exe = self.scratch / name
        subprocess.run(["cc", "-O2", *flags, "-o", str(exe), str(source)], check=True)
        return exe

    def start(self, argv: list[str], *, cwd=None) -> int:
        """Starts a target that prints `ready PID` first; returns the pid."""
        p = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd or ROOT, env=ENV
        )
        self.children.append(p)
        line = p.stdout.readline().split()
        if len(line) != 2 or line[0] != "ready" or int(line[1]) != p.pid:
            raise ExampleError(f"{argv[0]} did not print `ready {p.pid}` (got {line})")
        return p.pid

    def close(self):
        for p in self.children:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()


def demo_target(ctx: Ctx) -> int:
    exe = ctx.cc(ROOT / "cli/demo/demo.c", "demo")
    return ctx.start([str(exe)])


def bt_until(ctx: Ctx, args: list[str], want: str, without_stop: bool = True) -> str:
    """`argstash bt ARGS` until its output contains WANT and (WITHOUT_STOP) the
    thread was read without a stop (blocked in its sleep, as it is nearly all the
    time; 32-bit processes are always stopped)."""
    out = ""
    for _ in range(100):
        out = ctx.argstash_run(args)
        if want in out and (not without_stop or "(read without a stop" in out):
            return out
        time.sleep(0.05)
    raise ExampleError(f"argstash {' '.join(args)} never showed {want!r}:\n{out}")


def transcript(*steps: tuple[str, str]) -> str:
    return "".join(f"$ {cmd}\n{out}" for cmd, out in steps)


def ex_help(ctx: Ctx, args: list[str]) -> str:
    return ctx.argstash_run([*args, "--help"])


def ex_demo(ctx: Ctx, args: list[str]) -> str:
    return transcript(("argstash demo", ctx.argstash_run(["demo"])))


def ex_native(ctx: Ctx, args: list[str]) -> str:
    """inject, bt, list, eject on the demo target (main -> foo(5) -> bar(28))."""
    pid = demo_target(ctx)
    inject = ["inject", "--pid", str(pid), "--func", "bar", "--func", "foo"]
    steps = [(" ".join(["argstash", *inject]), ctx.argstash_run(inject))]
    bt = ["bt", "--pid", str(pid)]
    steps.append(("argstash " + " ".join(bt), bt_until(ctx, bt, "in bar (rdi=28")))
    ls = ["list", "--pid", str(pid)]
    steps.append(("argstash " + " ".join(ls), ctx.argstash_run(ls)))
    ej = ["eject", "--pid", str(pid), "--all"]
    steps.append(("argstash " + " ".join(ej), ctx.argstash_run(ej)))
    if "only" in args:
        keep = set(args[args.index("only") + 1 :])
        steps = [s for s in steps if s[0].split()[1] in keep]
    return transcript(*steps)


def ex_bad_signature(ctx: Ctx, args: list[str]) -> str:
    """A malformed typed signature, refused before the process is touched."""
    pid = demo_target(ctx)
    cmd = ["inject", "--pid", str(pid), "--func", "step(int a))"]
    out = ctx.argstash_run(cmd, ok_codes=(1, 2))
    return transcript((f"argstash inject --pid {pid} --func 'step(int a))'", out))


def ex_python(ctx: Ctx, args: list[str]) -> str:
    """`bt --python` of a copy of docs/examples/app.py."""
    (ctx.scratch / "app.py").write_text((ROOT / "docs/examples/app.py").read_text())
    pid = ctx.start(["python3", "app.py"], cwd=ctx.scratch)
    bt = ["bt", "--pid", str(pid), "--python"]
    out = bt_until(ctx, bt, "[py] handle (")
    return transcript(
        ("python3 app.py &", f"ready {pid}\n"),
        (f"argstash bt --pid {pid} --python", out),
    )


def ex_crash(ctx: Ctx, args: list[str]) -> str:
    """`argstash run` of docs/examples/parse.c, which crashes in parse_record(7, 16)."""
    ctx.cc(ROOT / "docs/examples/parse.c", "parse")
    cmd = ["run", "--func", "parse_record", "--", "./parse", "7", "16"]
    p = subprocess.run(
        [str(ctx.argstash), *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        cwd=ctx.scratch,
        timeout=120,
    )
    if p.returncode != -signal.SIGSEGV:
        raise ExampleError(f"argstash run of parse did not die of SIGSEGV ({p.returncode}):\n{p.stdout}")
    return transcript(
        ("cc -O2 -o parse docs/examples/parse.c", ""),
        ("argstash run --func parse_record -- ./parse 7 16", p.stdout),
        ("echo $?", f"{128 + signal.SIGSEGV}\n"),
    )


def frames_of(out: str, *names: str) -> list[str]:
    """The frame lines of a backtrace that are in one of NAMES."""
    return [l for l in out.split("\n") if any(f" in {n} (" in l for n in names)]


def ex_dwarf(ctx: Ctx, args: list[str]) -> str:
    """tests/fixtures/dwarfargs.c at -O2 -g: a hooked `report`, an unhooked `outer`
    whose arguments come from DWARF; the two frames of `bt`."""
    exe = ctx.cc(ROOT / "tests/fixtures/dwarfargs.c", "dwarfargs", "-g", f"-I{ROOT / 'tests/fixtures'}")
    pid = ctx.start([str(exe)])
    ctx.argstash_run(["inject", "--pid", str(pid), "--func", "report"])
    out = bt_until(ctx, ["bt", "--pid", str(pid)], "[stashed] at dwarfargs.c")
    lines = frames_of(out, "report", "outer")
    if len(lines) != 2:
        raise ExampleError(f"no report and outer frames in:\n{out}")
    return "\n".join(lines) + "\n"


def ex_i386(ctx: Ctx, args: list[str]) -> str:
    """tests/fixtures/dwarf32.c built with `cc -m32 -O2 -g`, then stripped: the
    hooked functions' frames with DWARF (two backtraces: each runs in turn), and
    without."""
    inc = f"-I{ROOT / 'tests/fixtures'}"
    exe = ctx.cc(ROOT / "tests/fixtures/dwarf32.c", "prog32", "-m32", "-g", inc)
    stripped = ctx.scratch / "prog32-stripped"
    subprocess.run(["strip", "--strip-debug", "-o", str(stripped), str(exe)], check=True)
    argv = ["86", "0x100000011", "stash-me", "2.5"]
    pid = ctx.start([str(exe), *argv])
    ctx.argstash_run(["inject", "--pid", str(pid), "--func", "mixed_cdecl", "--func", "fast_two"])
    bt = ["bt", "--pid", str(pid)]
    first = frames_of(bt_until(ctx, bt, "in mixed_cdecl (a=", False), "mixed_cdecl")
    second = frames_of(bt_until(ctx, bt, "in fast_two (a=", False), "fast_two", "main")
    pid2 = ctx.start([str(stripped), *argv])
    ctx.argstash_run(["inject", "--pid", str(pid2), "--func", "fast_two"])
    third = frames_of(bt_until(ctx, ["bt", "--pid", str(pid2)], "in fast_two (", False), "fast_two")
    return transcript(
        (f"argstash bt --pid {pid}        # twice: mixed_cdecl, then fast_two on the stack", "\n".join(first + second) + "\n"),
        (f"argstash bt --pid {pid2}        # the same, stripped of debug info", "\n".join(third) + "\n"),
    )


def ex_exceptions(ctx: Ctx, args: list[str]) -> str:
    """`inject` into a C++ program that throws through the hooked function
    (tests/fixtures/exceptions.cpp, `callee` mode: relay(i) calls a thrower)."""
    exe = ROOT / "tests/fixtures/exceptions.cpp"
    prog = ctx.scratch / "exceptions"
    subprocess.run(["c++", "-O2", f"-I{ROOT / 'tests/fixtures'}", "-o", str(prog), str(exe)], check=True)
    pid = ctx.start([str(prog), "callee", "1"])
    cmd = ["inject", "--pid", str(pid), "--func", "relay"]
    return transcript((f"argstash inject --pid {pid} --func relay", ctx.argstash_run(cmd)))


def guide_block(page: str, lang: str) -> str:
    """The first ```LANG block of a guide page (indentation removed), as a user copies it."""
    text = (ROOT / page).read_text()
    m = re.search(rf"^([ \t]*)```{lang}\n(.*?)^\1```", text, re.M | re.S)
    if not m:
        raise ExampleError(f"{page} has no ```{lang} block")
    return "\n".join(l.strip() for l in m.group(2).split("\n"))


def ex_cargo_runner(ctx: Ctx, args: list[str]) -> str:
    """docs/examples/crashy.rs in a `cargo new` crate with the guide's runner."""
    subprocess.run(["cargo", "new", "--quiet", "--vcs", "none", "crashy"], cwd=ctx.scratch, check=True)
    krate = ctx.scratch / "crashy"
    (krate / "src/main.rs").write_text((ROOT / "docs/examples/crashy.rs").read_text())
    (krate / ".cargo").mkdir()
    (krate / ".cargo/config.toml").write_text(guide_block("docs/guide/crash-reports.md", "toml"))
    env = dict(ENV, PATH=f"{ctx.argstash.parent}:{ENV['PATH']}", CARGO_TERM_COLOR="never")
    env.pop("CARGO_TARGET_DIR", None)
    p = subprocess.run(
        ["cargo", "run", "--", "7", "16"],
        cwd=krate,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    if p.returncode != 128 + signal.SIGSEGV and p.returncode != -signal.SIGSEGV:
        raise ExampleError(f"cargo run under the runner exited {p.returncode}:\n{p.stdout}")
    # cargo's own build lines come before the run; the example starts at the run.
    out = p.stdout[p.stdout.index("     Running") :]
    return transcript(("cargo run -- 7 16", out), ("echo $?", f"{128 + signal.SIGSEGV}\n"))


def ex_daemon(ctx: Ctx, args: list[str]) -> str:
    """The CLI through argstashd on a private bus, against the demo target."""
    daemon = ctx.argstash.with_name("argstashd")
    if not daemon.exists():
        raise ExampleError(f"{daemon} is missing: cargo build -p argstashd")
    sock = ctx.scratch / "bus"
    conf = ctx.scratch / "bus.conf"
    conf.write_text(
        "<busconfig><type>custom</type>"
        f"<listen>unix:path={sock}</listen><auth>EXTERNAL</auth>"
        '<policy context="default"><allow user="*"/><allow own="*"/>'
        '<allow send_destination="*"/><allow receive_type="method_call"/>'
        '<allow receive_type="method_return"/><allow receive_type="error"/>'
        '<allow receive_type="signal"/></policy></busconfig>\n'
    )
    bus = subprocess.Popen(
        ["dbus-daemon", "--config-file", str(conf), "--nofork"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    ctx.children.append(bus)
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    address = f"unix:path={sock}"
    d = subprocess.Popen(
        [str(daemon), "--address", address, "--state-dir", str(ctx.scratch / "state")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx.children.append(d)
    pid = demo_target(ctx)
    shown = "unix:path=/tmp/argstash-bus"
    steps = []
    for sub in (
        ["inject", "--pid", str(pid), "--func", "bar"],
        ["bt", "--pid", str(pid)],
        ["eject", "--pid", str(pid), "--all"],
    ):
        full = ["--bus", address, *sub]
        for _ in range(100):  # the daemon takes its name on the bus shortly after start
            p = subprocess.run(
                [str(ctx.argstash), *full], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV
            )
            if p.returncode == 0 and (
                sub[0] != "bt" or ("in bar (rdi=28" in p.stdout and "(read without a stop" in p.stdout)
            ):
                break
            time.sleep(0.05)
        else:
            raise ExampleError(f"argstash {' '.join(full)} exited {p.returncode}:\n{p.stdout}")
        steps.append(("argstash --bus " + shown + " " + " ".join(sub), p.stdout))
    return transcript(*steps)


EXAMPLES = {
    "help": ex_help,
    "demo": ex_demo,
    "native": ex_native,
    "bad-signature": ex_bad_signature,
    "python": ex_python,
    "crash": ex_crash,
    "daemon": ex_daemon,
    "cargo-runner": ex_cargo_runner,
    "dwarf": ex_dwarf,
    "i386": ex_i386,
    "exceptions": ex_exceptions,
}

HEX = re.compile(r"0x[0-9a-f]+")
TMP = re.compile(r"/tmp/[A-Za-z0-9_.+-]+")
PID_CONTEXTS = re.compile(
    r"(?:\bpid |--pid |\bThread |\bthread |\bready |\bas pid |\(pid )(\d+)"
    r"|(?:perf|jit|argstash|argstash-jit)-(\d+)\.(?:map|dump|elf|so)"
)
TIMING = re.compile(r"\b\d+(?:\.\d+)? ?(us|ms|s)\b")
FRAME = re.compile(r"^\s*#\d+ ")
# Registers a one- or two-argument function (eax: an i386 fastcall one) does not
# read, and the stack words above the i386 example's three arguments: what they hold at the
# call is whatever the caller left there, which differs from run to run.
LEFTOVER = re.compile(r"\b(rdx|rcx|r8|r9|eax|stack\+(?:[89]|[1-9][0-9]+))=[^,)]+")
# An unhooked frame's parameter: DWARF recovers it or says <optimized out>
# depending on whether the thread was read stopped or without a stop.
PARAM = re.compile(r"\b(\w+)=(?:\([^()]*\) )?(?:<optimized out>|[^,)]+)")


def normalise(text: str) -> str:
    """What stays the same from run to run: the text with the varying parts named."""
    pids = {m.group(1) or m.group(2) for m in PID_CONTEXTS.finditer(text)}
    for pid in sorted(pids, key=len, reverse=True):
        text = re.sub(rf"\b{pid}\b", "PID", text)
    text = text.replace(str(ROOT) + "/", "")
    text = HEX.sub("0xX", text)
    text = TMP.sub("/tmp/T", text)
    text = TIMING.sub(r"N\1", text)
    lines = []
    for line in text.split("\n"):
        if FRAME.match(line):
            line = LEFTOVER.sub(r"\1=V", line) if "[stashed" in line else PARAM.sub(r"\1=V", line)
        lines.append(line)
    return "\n".join(lines)


def blocks(path: Path):
    """(marker line index, spec, indent, first body line, end fence line) of each example."""
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            indent = m.group("indent")
            fence = i + 1
            if fence >= len(lines) or not lines[fence].startswith(indent + "```"):
                raise ExampleError(f"{path.relative_to(ROOT)}:{i + 1}: the marker is not followed by a fenced block")
            end = fence + 1
            while end < len(lines) and lines[end].rstrip() != indent + "```":
                end += 1
            if end == len(lines):
                raise ExampleError(f"{path.relative_to(ROOT)}:{fence + 1}: the fenced block never ends")
            yield i, m.group("spec").split(), indent, fence + 1, end
            i = end
        i += 1


def build() -> Path:
    subprocess.run(
        ["cargo", "build", "--quiet", "-p", "argstash", "-p", "argstashd"], cwd=ROOT, check=True
    )
    return ROOT / "target/debug/argstash"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail when an output block is stale")
    mode.add_argument("--write", action="store_true", help="rewrite the output blocks")
    ap.add_argument("--argstash", type=Path, help="the binary to run (default: build target/debug/argstash)")
    ap.add_argument("--only", help="only examples whose spec starts with this (e.g. help)")
    opts = ap.parse_args()

    argstash = (opts.argstash or build()).resolve()
    if not os.access(argstash, os.X_OK):
        print(f"docs-examples: {argstash} is not an executable (cargo build -p argstash)", file=sys.stderr)
        return 1
    stale = 0
    total = 0
    for path in DOCS:
        found = list(blocks(path))
        if not found:
            continue
        lines = path.read_text().split("\n")
        for _marker, spec, indent, start, end in reversed(found):
            if opts.only and not " ".join(spec).startswith(opts.only):
                continue
            name, args = spec[0], spec[1:]
            if name not in EXAMPLES:
                raise ExampleError(f"{path.relative_to(ROOT)}: unknown example {name!r} (known: {', '.join(EXAMPLES)})")
            total += 1
            with tempfile.TemporaryDirectory(prefix="argstash-docs-") as scratch:
                ctx = Ctx(argstash, Path(scratch))
                try:
                    out = EXAMPLES[name](ctx, args)
                finally:
                    ctx.close()
            fresh = [indent + l if l else l for l in out.rstrip("\n").split("\n")]
            have = [l[len(indent) :] if l.startswith(indent) else l for l in lines[start:end]]
            new = [l[len(indent) :] if l.startswith(indent) else l for l in fresh]
            if normalise("\n".join(have)) != normalise("\n".join(new)):
                where = f"{path.relative_to(ROOT)}:{start}"
                if opts.write:
                    print(f"docs-examples: rewrote {where} ({' '.join(spec)})")
                    lines[start:end] = fresh
                else:
                    stale += 1
                    print(f"docs-examples: {where}: the output of `{' '.join(spec)}` differs (normalised diff):")
                    diff = difflib.unified_diff(
                        normalise("\n".join(have)).split("\n"),
                        normalise("\n".join(new)).split("\n"),
                        "documented",
                        "current build",
                        lineterm="",
                    )
                    print("\n".join(diff))
        if opts.write:
            path.write_text("\n".join(lines))
    if stale:
        print(
            f"docs-examples: {stale} of {total} example blocks are stale; "
            "run scripts/docs-examples.py --write and review the diff",
            file=sys.stderr,
        )
        return 1
    print(f"docs-examples: {total} example blocks match the current build")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ExampleError as e:
        print(f"docs-examples: {e}", file=sys.stderr)
        sys.exit(1)
