#!/usr/bin/env python3
"""`argstash run` start-up and run-time cost, interleaved with direct runs.

Usage: cargo build --release -p argstash && cc -O2 -g -o /tmp/busy scripts/bench-run-busy.c
       && (cd /tmp && python3 /path/to/scripts/bench-run.py)
"""
import subprocess, time, statistics, sys
import os
A = os.environ.get("ARGSTASH", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "argstash"))
def t(cmd):
    s = time.perf_counter(); subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True); return time.perf_counter() - s
def bench(label, direct, traced, rounds):
    d, r = [], []
    for i in range(rounds):  # interleaved
        d.append(t(direct)); r.append(t(traced))
    md, mr = statistics.median(d), statistics.median(r)
    print(f"{label}: direct median {md*1000:.2f} ms, argstash run median {mr*1000:.2f} ms, added {(mr-md)*1000:.2f} ms ({(mr/md-1)*100:.2f}%), {rounds} interleaved rounds")
bench("start-up (busy 1, --func work)", ["./busy", "1"], [A, "run", "--func", "work", "--", "./busy", "1"], 100)
bench("start-up (busy 1, --func work, --unwind-registration off)", ["./busy", "1"], [A, "run", "--unwind-registration", "off", "--func", "work", "--", "./busy", "1"], 100)
bench("start-up (busy 1, no --func)", ["./busy", "1"], [A, "run", "--", "./busy", "1"], 100)
bench("run time (busy 300M, --func work)", ["./busy", "300000000"], [A, "run", "--func", "work", "--", "./busy", "300000000"], 21)
def inner(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    return int(out.split()[1]) / 1e9
d, r = [], []
for i in range(21):
    d.append(inner(["./busy", "300000000"])); r.append(inner([A, "run", "--func", "work", "--", "./busy", "300000000"]))
md, mr = statistics.median(d), statistics.median(r)
print(f"child's own run time (work(300M), timed inside the child): direct median {md*1000:.1f} ms, under argstash run {mr*1000:.1f} ms ({(mr/md-1)*100:+.2f}%), 21 interleaved rounds")
