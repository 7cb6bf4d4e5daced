#!/usr/bin/env python3
"""Medians (and ranges) over rounds of paired.csv-style files: B / A of the
total time per step, cold and warm, for each build and setting.

    python3 results/speed/round10/paired_table.py paired-handler.csv
"""
import csv
import statistics
import sys
from collections import defaultdict

g = defaultdict(list)
builds = []
for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    if r["build"] not in builds:
        builds.append(r["build"])
    g[(r["workload"], int(r["lbr"]), int(r["period_ms"]), r["build"])].append(r)


def cell(rows, field):
    v = [float(r[field]) for r in rows]
    return "%.3f (%.3f–%.3f)" % (statistics.median(v), min(v), max(v))


print("| workload | N, period | build | rounds | cold B/A | warm B/A | A ns per step, cold / warm |")
print("|---|---|---|---|---|---|---|")
for key in sorted({k[:3] for k in g}, key=lambda k: (k[0], -k[1], -k[2])):
    for b in builds:
        rows = g.get(key + (b,), [])
        if rows:
            print("| %s | %d, %d ms | %s | %d | %s | %s | %.0f / %.0f |" % (
                key[0], key[1], key[2], b, len(rows), cell(rows, "cold_b_over_a"),
                cell(rows, "warm_b_over_a"),
                statistics.median(float(r["cold_ns_per_step_a"]) for r in rows),
                statistics.median(float(r["warm_ns_per_step_a"]) for r in rows)))
