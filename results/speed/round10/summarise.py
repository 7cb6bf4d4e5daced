#!/usr/bin/env python3
"""Medians per build of compare.sh's runs, and the counters summed.

    python3 results/speed/round10/summarise.py compare.csv
"""
import csv
import statistics
import sys
from collections import defaultdict

rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
groups = defaultdict(list)
for r in rows:
    groups[(r["workload"], int(r["lbr"]), int(r["period_ms"]), r["lib"])].append(r)
libs = list(dict.fromkeys(r["lib"] for r in rows))
print("| workload | N, period | build | runs | traces | ns per step run | decodes per 100 steps | stops per trace | checkpoints | mismatches (reg/mem) | unreached | extra hits | validated entries |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in sorted({k[:3] for k in groups}, key=lambda k: (k[1], k[2], k[0])):
    for lib in libs:
        g = groups.get(key + (lib,), [])
        if not g:
            continue
        med = lambda f: statistics.median(float(r[f]) for r in g)
        tot = lambda f: sum(int(r[f]) for r in g)
        print("| %s | %d, %d ms | %s | %d | %.0f | %.1f | %.2f | %.2f | %d | %d/%d | %d | %d | %d |" % (
            key[0], key[1], key[2], lib, len(g), med("traces"), med("ns_per_step_run"),
            med("decodes_per_100_steps"), med("stops_per_trace"), tot("checkpoints"),
            tot("mismatch_registers"), tot("mismatch_memory"), tot("checkpoint_unreached"),
            tot("checkpoint_extra_hits"), tot("validated_entries")))
