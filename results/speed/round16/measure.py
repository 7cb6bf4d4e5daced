#!/usr/bin/env python3
"""The table of measure.sh's output directory: per workload and setting,
medians over the rounds (each profiled run set against the native run of
its own round)."""
import csv
import json
import os
import statistics as st
import sys

out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
cpu = lambda r: float(r["user_s"]) + float(r["sys_s"])
native = {(r["workload"], r["round"]): cpu(r) for r in rows if r["setting"] == "native"}
print("| workload | setting | CPU over native | ns per step | ns per step run | decodes per 100 steps | "
      "steps per trace | handler µs per trace | extra CPU per trace (µs) | branches per µs of handler time | "
      "stops per trace | start and stop ms | worker ms | mismatches (reg/mem) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
keys = list(dict.fromkeys((r["workload"], r["setting"]) for r in rows if r["setting"] != "native"))
for wl, s in keys:
    rs = [r for r in rows if (r["workload"], r["setting"]) == (wl, s)]
    ss = [json.load(open(os.path.join(out, "%s-%s-%s.json" % (wl, s, r["round"])))) for r in rs]
    med = lambda f: st.median(f(r, d) for r, d in zip(rs, ss))
    handler = lambda d: d["sampling_ns"] + d["breakpoint_ns"]
    print("| %s | %s | %.3f× | %.0f | %.0f | %.1f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %d/%d |" % (
        wl, s.replace("-", " / ").replace("ms", " ms"),
        med(lambda r, d: cpu(r) / native[(wl, r["round"])]),
        med(lambda r, d: d["emulation_ns"] / max(1, d["emulated_steps"])),
        med(lambda r, d: d["emulation_ns"] / max(1, d["emulated_steps_run"])),
        med(lambda r, d: 100 * d["emulation_decodes"] / max(1, d["emulated_steps"])),
        med(lambda r, d: d["emulated_steps"] / max(1, d["traces_started"])),
        med(lambda r, d: handler(d) / 1e3 / max(1, d["traces_started"])),
        med(lambda r, d: (cpu(r) - native[(wl, r["round"])]) * 1e6 / max(1, d["traces_started"])),
        med(lambda r, d: d["entries_recorded"] / max(1, handler(d) / 1e3)),
        med(lambda r, d: d["breakpoints"] / max(1, d["traces_started"])),
        med(lambda r, d: d["start_stop_ns"] / 1e6),
        med(lambda r, d: d["worker_ns"] / 1e6),
        sum(d["speculation_mismatch_registers"] for d in ss),
        sum(d["speculation_mismatch_memory"] for d in ss)))
print()
ratios = {}
for wl, s in keys:
    rs = [r for r in rows if (r["workload"], r["setting"]) == (wl, s)]
    ratios.setdefault(s, []).append(st.median(cpu(r) / native[(wl, r["round"])] for r in rs))
print("Geomean of the CPU ratios: %s." % "; ".join(
    "%s %.3f×" % (s.replace("-", " / ").replace("ms", " ms"), st.geometric_mean(v))
    for s, v in ratios.items()))
print()
print("%d rounds; native CPU medians: %s" % (
    len({r["round"] for r in rows}),
    ", ".join("%s %.3f s" % (wl, st.median(v for (w, _), v in native.items() if w == wl))
              for wl in dict.fromkeys(w for w, _ in native))))
