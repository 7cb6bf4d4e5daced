#!/usr/bin/env python3
"""The table of decompose.sh's output directory: per workload, the
median over rounds of each configuration's CPU, its ratio to the same
round's native run, and what the differences say per sample."""
import csv, json, os, statistics as st, sys
from collections import defaultdict

out = sys.argv[1] if len(sys.argv) > 1 else "target/device/decompose"
cpu = defaultdict(dict)  # (workload, config) -> round -> CPU s
for r in csv.DictReader(open(os.path.join(out, "runs.csv"))):
    cpu[(r["part"], r["setting"])][r["round"]] = float(r["user_s"]) + float(r["sys_s"])


def summaries(w, c):
    ss = []
    for rnd in cpu[(w, c)]:
        p = os.path.join(out, f"{w}-{c}-{rnd}.json")
        if os.path.exists(p):
            ss.append(json.load(open(p)))
    return ss


def med(xs):
    return st.median(xs) if xs else float("nan")


def ratio(w, c):
    nat = cpu[(w, "native")]
    return med([v / nat[k] for k, v in cpu[(w, c)].items() if k in nat])


def extra_ms(w, c, base):
    """Median over rounds of (c - base) CPU in ms, paired by round."""
    b = cpu[(w, base)]
    return med([(v - b[k]) * 1e3 for k, v in cpu[(w, c)].items() if k in b])


configs = ["native", "never", "sample-only", "emulate-only", "full-3ms", "full-10ms"]
workloads = sorted({w for w, _ in cpu})
print("| workload | configuration | rounds | CPU (s) | over native | samples | traces | handler ms | emulation ms | worker ms | start+stop ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for w in workloads:
    for c in configs:
        if (w, c) not in cpu:
            continue
        ss = summaries(w, c)
        g = lambda f: med([f(s) for s in ss]) if ss else float("nan")
        print(
            f"| {w} | {c} | {len(cpu[(w, c)])} | {med(list(cpu[(w, c)].values())):.3f} | {ratio(w, c):.3f}× "
            f"| {g(lambda s: s['samples']):.0f} | {g(lambda s: s['traces_completed']):.0f} "
            f"| {g(lambda s: (s['sampling_ns'] + s['breakpoint_ns']) / 1e6):.1f} "
            f"| {g(lambda s: s['emulation_ns'] / 1e6):.1f} | {g(lambda s: s['worker_ns'] / 1e6):.1f} "
            f"| {g(lambda s: s['start_stop_ns'] / 1e6):.1f} |"
        )
print()
print("| workload | fixed cost per process (never − native), ms | a sample that only re-arms (sample-only − never), µs | emulating one segment (emulate-only − sample-only), µs per sample | of which the emulation's own time, µs | the application slower after it, µs | a whole trace at 3 ms (full − never), µs | of which in the handlers, µs |")
print("|---|---|---|---|---|---|---|---|")
for w in workloads:
    so, eo, fu = summaries(w, "sample-only"), summaries(w, "emulate-only"), summaries(w, "full-3ms")
    n_so = med([s["samples"] for s in so])
    n_eo = med([s["samples"] for s in eo])
    n_fu = med([s["traces_completed"] for s in fu])
    fixed = extra_ms(w, "never", "native")
    per_sample = extra_ms(w, "sample-only", "never") * 1e3 / n_so
    # emulate-only - sample-only, per sample: both take about the same samples.
    seg = extra_ms(w, "emulate-only", "sample-only") * 1e3 / n_eo
    own = med([s["emulation_ns"] / s["samples"] / 1e3 for s in eo])
    trace = extra_ms(w, "full-3ms", "never") * 1e3 / n_fu
    handler = med([(s["sampling_ns"] + s["breakpoint_ns"]) / s["traces_completed"] / 1e3 for s in fu])
    print(f"| {w} | {fixed:.1f} | {per_sample:.0f} | {seg:.0f} | {own:.0f} | {seg - own:.0f} | {trace:.0f} | {handler:.0f} |")
