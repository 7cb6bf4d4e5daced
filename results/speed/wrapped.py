#!/usr/bin/env python3
"""Medians by workload, setting and build of a wrapped.sh CSV, as a
Markdown table: CPU over native (each run over its round's native run),
and the counters."""
import csv
import statistics as st
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
native = {(r["workload"], r["period_ms"], r["round"]): float(r["cpu_s"])
          for r in rows if r["build"] == "native"}
groups = defaultdict(list)
for r in rows:
    if r["build"] != "native":
        r["ratio"] = float(r["cpu_s"]) / native[(r["workload"], r["period_ms"], r["round"])]
        groups[(r["workload"], int(r["period_ms"]), r["build"])].append(r)
print("| workload | setting | build | CPU over native | stops per trace | steps run per kept "
      "| handler µs per trace | ns per step | entries proven % | segments settled "
      "| traces dropped (signal_handler) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(groups):
    rs = groups[key]
    med = lambda f: st.median(float(x[f]) for x in rs)
    print("| %s | 128/%d ms | %s | %.3f× | %.2f | %.2f | %.0f | %.0f | %.1f | %.0f | %.0f |" % (
        key[0], key[1], key[2], st.median(x["ratio"] for x in rs), med("stops_per_trace"),
        med("run_per_kept"), med("handler_us_per_trace"), med("ns_per_step"),
        med("proven_pct"), med("settled"), med("signal_handler")))
print()
# The builds' CPU against each other, round by round: the native run
# drifts between rounds more than the builds differ.
cpu = {(r["workload"], int(r["period_ms"]), r["round"], r["build"]): float(r["cpu_s"])
       for r in rows}
pairs = defaultdict(list)
for (w, p, rnd, b), v in cpu.items():
    if b == "after" and (w, p, rnd, "before") in cpu:
        pairs[(w, p)].append(v / cpu[(w, p, rnd, "before")])
for key in sorted(pairs):
    ratios = sorted(pairs[key])
    print("- %s 128/%d ms: after / before CPU, by round: median %.3f (%s)" % (
        key[0], key[1], st.median(ratios), ", ".join("%.2f" % x for x in ratios)))
print()
print("%d rounds; medians." % len({r["round"] for r in rows}))
