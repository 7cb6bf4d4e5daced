"""Medians per workload, setting and build of round8/decoding.sh's CSV
files (lines starting with # skipped), as a markdown table. Runs with
fewer than a fifth of the median traces of their workload and setting
(both builds) are left out: those are runs where sampling stopped early
(the bug round9/lost-sampling.txt shows, fixed in the same round); the
runs column counts the rest.

    python3 results/speed/round9/summarise.py results/speed/round9/decoding.csv
"""
import csv, statistics as st, sys
from collections import defaultdict
rows=[]
for f in sys.argv[1:]:
    rows+=list(csv.DictReader(l for l in open(f) if not l.startswith('#')))
g=defaultdict(list)
traces=defaultdict(list)
for r in rows:
    traces[(r['workload'],r['lbr'],r['period_ms'])].append(int(r['traces']))
for r in rows:
    if 5 * int(r['traces']) < st.median(traces[(r['workload'],r['lbr'],r['period_ms'])]):
        continue
    g[(r['workload'],int(r['lbr']),int(r['period_ms']),r['lib'])].append(r)
print("| workload | N, period | build | runs | ns per step run | decodes per 100 steps | ns per decode | decoding ms per run | decoding share |")
print("|---|---|---|---|---|---|---|---|---|")
for k in sorted(g, key=lambda k:(k[0],k[1],k[2],k[3]!='before')):
    v=g[k]
    m=lambda f: st.median(float(x[f]) for x in v)
    print("| %s | %d, %d ms | %s | %d | %.0f | %.2f | %.0f | %.2f | %.0f%% |" % (k[0],k[1],k[2],k[3],len(v), m('ns_per_step_run'), m('decodes_per_100_steps'), m('decode_ns_per_decode'), m('decode_ns')/1e6, 100*m('decoding_share_of_emulation')))
