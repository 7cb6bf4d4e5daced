#!/usr/bin/env python3
"""B / A of results/speed/paired.sh rows per setting: the runs pooled
(total ns over total steps) and the median run, cold and warm, with the
traces whose steps differed between A and B (must be 0)."""
import csv,sys,statistics as st
rows=list(csv.DictReader(open(sys.argv[1])))
keys=list(dict.fromkeys((r['workload'],r['lbr'],r['period_ms']) for r in rows))
for k in keys:
    rs=[r for r in rows if (r['workload'],r['lbr'],r['period_ms'])==k]
    # pooled over runs: total ns ratio
    ca=sum(float(r['cold_ns_per_step_a'])*int(r['steps']) for r in rs); cb=sum(float(r['cold_ns_per_step_b'])*int(r['steps']) for r in rs)
    wa=sum(float(r['warm_ns_per_step_a'])*int(r['steps']) for r in rs); wb=sum(float(r['warm_ns_per_step_b'])*int(r['steps']) for r in rs)
    print(k, len(rs), 'cold B/A pooled %.3f med-run %.3f | warm pooled %.3f med-run %.3f | diff %d' % (cb/ca, st.median(float(r['cold_b_over_a']) for r in rs), wb/wa, st.median(float(r['warm_b_over_a']) for r in rs), sum(int(r['traces_whose_steps_differed']) for r in rs)))
