#!/usr/bin/env python3
"""Summarises paired.sh rows (with a leading build,round pair of columns, as
in paired/round5.csv) as a markdown table: per workload, setting and build,
the medians over runs of ns per step (A and B, cold and warm) and of the
ratios B / A.

    results/speed/paired.py results/speed/paired/round5.csv
"""
import csv
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = list(csv.DictReader(line for line in open(path) if not line.startswith("#")))
    groups = defaultdict(list)
    for r in rows:
        groups[(r["workload"], int(r["lbr"]), int(r["period_ms"]), r["build"])].append(r)
    print("| workload | setting | build | runs | traces a run | cold ns/step A | cold B | "
          "warm ns/step A | warm B | cold B/A (range) | warm B/A (range) | traces whose steps differed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (w, lbr, ms, build), rs in sorted(groups.items()):
        def med(key):
            return statistics.median(float(r[key]) for r in rs)

        def span(key):
            v = [float(r[key]) for r in rs]
            return "%.3f (%.3f–%.3f)" % (statistics.median(v), min(v), max(v))

        print("| %s | %d/%d ms | %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s | %d |" % (
            w, lbr, ms, build, len(rs), med("traces"),
            med("cold_ns_per_step_a"), med("cold_ns_per_step_b"),
            med("warm_ns_per_step_a"), med("warm_ns_per_step_b"),
            span("cold_b_over_a"), span("warm_b_over_a"),
            sum(int(r["traces_whose_steps_differed"]) for r in rs)))


if __name__ == "__main__":
    main(sys.argv[1])
