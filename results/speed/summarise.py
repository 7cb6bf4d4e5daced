#!/usr/bin/env python3
"""Medians per setting and build of results/speed/measure.sh's CSV."""
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1] if len(sys.argv) > 1 else "results/speed/runs.csv")))
print("| LBR, period | build | CPU over native | ns per emulated step | decodes per 100 steps | steps per trace | extra CPU per trace (µs) | checkpoint mismatches (reg/mem) | steps run per kept | stops per trace | handler µs per trace |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for lbr, ms in [("32", "1"), ("128", "3"), ("128", "10")]:
    for build in ("before", "after"):
        rs = [r for r in rows if r["lbr"] == lbr and r["period_ms"] == ms and r["build"] == build and r["ns_per_step"]]
        if not rs:
            continue
        med = lambda k: st.median(float(r[k]) for r in rs)
        # Columns older runs.csv files lack.
        opt = lambda k, f: format(med(k), f) if rs[0].get(k) else "–"
        ratio = st.median(float(r["cpu_s"]) / float(r["native_s"]) for r in rs)
        extra = st.median((float(r["cpu_s"]) - float(r["native_s"])) / int(r["traces"]) * 1e6 for r in rs)
        mism = "%d/%d" % (sum(int(r["mismatch_registers"]) for r in rs), sum(int(r["mismatch_memory"]) for r in rs))
        print(f"| {lbr}, {ms} ms | {build} | {ratio:.3f}× | {med('ns_per_step'):.0f} | {med('decodes_per_100'):.1f} | {med('steps_per_trace'):.0f} | {extra:.0f} | {mism} | {opt('steps_run_per_kept', '.2f')} | {opt('stops_per_trace', '.2f')} | {opt('handler_us_per_trace', '.0f')} |")
print(f"\n{len(rows)} runs, {len(set(r['round'] for r in rows))} rounds.")
