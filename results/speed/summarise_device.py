#!/usr/bin/env python3
"""Tables from results/speed/device.sh's output directory (runs.csv and
each run's summary.json): medians over the rounds."""
import csv, json, os, statistics as st, sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "device")
rows = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
cpu = lambda r: float(r["user_s"]) + float(r["sys_s"])
def summary(r):
    p = os.path.join(out, "%s-%s-%s-%s.json" % (r["part"], r["setting"], r["round"], r["build"]))
    return json.load(open(p)) if os.path.exists(p) else None
def native(r):
    return next(n for n in rows if n["part"] == r["part"] and n["setting"] == r["setting"]
                and n["round"] == r["round"] and n["build"] == "native")
print("| workload | setting | build | CPU over native | ns per kept step | ns per step run | steps run per kept | decodes per 100 steps run | segments per trace | stops per trace | handler µs per trace | extra CPU per trace (µs) | peak RSS (MB) | mismatches (reg/mem) | entries proven |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
# The builds in the order their first run appears (before, after, ...).
builds = []
for r in rows:
    if r["build"] != "native" and r["build"] not in builds:
        builds.append(r["build"])
seen = []
for r in rows:
    key = (r["part"], r["setting"])
    if key not in seen:
        seen.append(key)
for part, setting in seen:
    for build in builds:
        rs = [r for r in rows if (r["part"], r["setting"], r["build"]) == (part, setting, build)]
        if not rs:
            continue
        ss = [summary(r) for r in rs]
        med = lambda f: st.median(f(r, s) for r, s in zip(rs, ss))
        ratio = med(lambda r, s: cpu(r) / cpu(native(r)))
        extra = med(lambda r, s: (cpu(r) - cpu(native(r))) / max(1, s["traces_started"]) * 1e6)
        kept = med(lambda r, s: s["emulation_ns"] / max(1, s["emulated_steps"]))
        run = s_run = "–"
        if all("emulated_steps_run" in s for s in ss):
            run = "%.0f" % med(lambda r, s: s["emulation_ns"] / max(1, s["emulated_steps_run"]))
            s_run = "%.2f" % med(lambda r, s: s["emulated_steps_run"] / max(1, s["emulated_steps"]))
            dec = med(lambda r, s: 100 * s["emulation_decodes"] / max(1, s["emulated_steps_run"]))
        else:
            dec = med(lambda r, s: 100 * s["emulation_decodes"] / max(1, s["emulated_steps"]))
        segs = med(lambda r, s: s["segments"] / max(1, s["traces_started"]))
        stops = med(lambda r, s: s["breakpoints"] / max(1, s["traces_started"]))
        handler = med(lambda r, s: (s["sampling_ns"] + s["breakpoint_ns"]) / max(1, s["traces_started"]) / 1e3)
        rss = med(lambda r, s: int(r["maxrss_kb"]) / 1024)
        mism = "%d/%d" % (sum(s["speculation_mismatch_registers"] for s in ss), sum(s["speculation_mismatch_memory"] for s in ss))
        entries = sum(s["proven_entries"] + s["validated_entries"] for s in ss)
        proven = "%.0f%%" % (100 * sum(s["proven_entries"] for s in ss) / max(1, entries))
        print(f"| {part} | {setting} | {build} | {ratio:.3f}× | {kept:.0f} | {run} | {s_run} | {dec:.1f} | {segs:.2f} | {stops:.2f} | {handler:.0f} | {extra:.0f} | {rss:.1f} | {mism} | {proven} |")
    nat = [r for r in rows if (r["part"], r["setting"], r["build"]) == (part, setting, "native")]
    print(f"| {part} | {setting} | native | {st.median(cpu(r) for r in nat):.3f} s | | | | | | | | | {st.median(int(r['maxrss_kb']) for r in nat) / 1024:.1f} | | |")
print(f"\n{len(rows)} runs; machine: " + " / ".join(open(os.path.join(out, "machine.txt")).read().split("\n")[:4]))
