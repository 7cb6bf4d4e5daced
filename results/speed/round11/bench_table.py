#!/usr/bin/env python3
"""Medians of bench-emulate.txt: ns per step run of each build, and the
per-round ratio head / base.

    python3 results/speed/round11/bench_table.py bench-emulate.txt
"""
import re,sys,statistics
from collections import defaultdict
d=defaultdict(dict)
for l in open(sys.argv[1]):
    if l.startswith("#"):
        continue
    m=re.match(r"(\w+) (\d+) (\w+)\s+N = (\d+)\s+(\w+)\s+caches:\s+([\d.]+) ns per kept step .*?,\s+([\d.]+) ns per step run",l)
    if not m: continue
    b,r,w,n,c,kept,run=m.groups()
    d[(w,int(n),c)].setdefault(b,{})[int(r)]=float(run)
print("| workload | N | caches | base ns/step run (median) | head | head/base per round: median (range) |")
print("|---|---|---|---|---|---|")
for k in sorted(d):
    base,head=d[k].get('base',{}),d[k].get('head',{})
    rounds=sorted(set(base)&set(head))
    if not rounds: continue
    ratios=[head[r]/base[r] for r in rounds]
    print("| %s | %d | %s | %.1f | %.1f | %.3f (%.3f–%.3f) |"%(k[0],k[1],k[2],statistics.median(base.values()),statistics.median(head.values()),statistics.median(ratios),min(ratios),max(ratios)))
