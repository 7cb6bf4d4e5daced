#!/usr/bin/env python3
"""The table of concurrent.sh's output directory: per workload and
configuration, the ratio of the profiled run's CPU to its native twin's
in the same round (median, and the interquartile range of the rounds),
beside the ratio of medians that runs taken in turn would give."""
import csv, json, os, statistics as st, sys
from collections import defaultdict

out = sys.argv[1] if len(sys.argv) > 1 else "target/device/concurrent"
pairs = defaultdict(dict)  # (workload, config) -> round -> {side: CPU s}
for r in csv.DictReader(open(os.path.join(out, "runs.csv"))):
    pairs[(r["workload"], r["config"])].setdefault(r["round"], {})[r["side"]] = float(r["user_s"]) + float(r["sys_s"])


def quartiles(xs):
    q = st.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[2]


print("| workload | configuration | rounds | CPU over native (median of rounds) | interquartile range | native CPU (s), min–max | traces | handler µs per trace | extra CPU per trace (µs) |")
print("|---|---|---|---|---|---|---|---|---|")
for (w, c) in sorted(pairs, key=lambda k: (k[0], ["native", "never", "32-1ms", "128-3ms", "128-10ms"].index(k[1]) if k[1] in ["native", "never", "32-1ms", "128-3ms", "128-10ms"] else 9)):
    rounds = {k: v for k, v in pairs[(w, c)].items() if "base" in v and "test" in v}
    ratios = [v["test"] / v["base"] for v in rounds.values()]
    lo, hi = quartiles(ratios)
    base = [v["base"] for v in rounds.values()]
    ss = [json.load(open(os.path.join(out, f"{w}-{c}-{k}.json"))) for k in rounds if os.path.exists(os.path.join(out, f"{w}-{c}-{k}.json"))]
    traces = st.median([s["traces_completed"] for s in ss]) if ss else 0
    handler = st.median([(s["sampling_ns"] + s["breakpoint_ns"]) / 1e3 / max(1, s["traces_completed"]) for s in ss]) if ss and traces else float("nan")
    extra = st.median([(v["test"] - v["base"]) * 1e6 for v in rounds.values()]) / traces if traces else float("nan")
    print(f"| {w} | {c} | {len(ratios)} | {st.median(ratios):.3f}× | {lo:.3f}–{hi:.3f} | {min(base):.3f}–{max(base):.3f} | {traces:.0f} | {handler:.0f} | {extra:.0f} |")
