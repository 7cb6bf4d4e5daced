#!/usr/bin/env python3
"""The census runs as one table: per workload and build, the runs' ranges.

    python3 results/speed/round10/census_table.py before=census-before-1.csv ... after=census-after-1.csv ...
"""
import csv, sys
from collections import defaultdict
# args: label=file ...
g=defaultdict(list)
order=[]
for a in sys.argv[1:]:
    lab,f=a.split('=',1)
    if lab not in order: order.append(lab)
    for r in csv.DictReader(l for l in open(f) if not l.startswith('#')):
        g[(r['workload'],int(r['lbr']),int(r['period_ms']),lab)].append(r)
parts=['code','index','memory','visits','state','stack','buffer']
print("| workload | N, period | build | runs | traces | handler KiB mean | p90 ≤ KiB | " + " | ".join(parts) + " |")
print("|---|---|---|---|---|---|---|" + "---|"*len(parts))
for k in sorted({k[:3] for k in g}, key=lambda k:(k[1],k[2],k[0])):
    for lab in order:
        rs=g.get(k+(lab,))
        if not rs: continue
        kb=lambda n: "–".join(sorted({"%.1f"%(int(r[n])/1024) for r in rs}, key=float)) if len(rs)==1 else "%.1f–%.1f"%(min(int(r[n]) for r in rs)/1024, max(int(r[n]) for r in rs)/1024)
        p90="/".join(r['handler_kib_per_trace_p90_at_most'] for r in rs)
        tr="/".join(r['traces'] for r in rs)
        print("| %s | %d, %d ms | %s | %d | %s | %s | %s | %s |"%(k[0],k[1],k[2],lab,len(rs),tr,kb('handler_bytes_per_trace_mean'),p90," | ".join(kb(p+'_bytes_per_trace_mean') for p in parts)))
