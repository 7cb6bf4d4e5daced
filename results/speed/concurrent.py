#!/usr/bin/env python3
"""The concurrent part of device.sh: builds timed at the same moment.

  concurrent.py csv DIR > runs.csv     every concurrent-*.txt under DIR
                                       (one directory per repetition of
                                       device.sh) as one CSV row each
  concurrent.py table runs.csv BASE    per workload and build: median ns
                                       per step, and the per-round ratios
                                       to BASE (each round's median over
                                       its copies)
"""
import csv, glob, os, re, statistics as st, sys

def rows_from_dir(root):
    out = []
    for f in sorted(glob.glob(os.path.join(root, "**", "concurrent-*.txt"), recursive=True)):
        m = re.match(r"concurrent-(\w+)-(\w+)-(\d+)-(\d+)\.txt", os.path.basename(f))
        build, work, rnd, copy = m.groups()
        rep = os.path.relpath(os.path.dirname(f), root)
        kv = dict(l.split()[:2] for l in open(f) if len(l.split()) >= 2)
        out.append({"rep": rep, "round": rnd, "copy": copy, "build": build, "workload": work,
                    "traces": kv["traces"], "cold_ns_per_step": kv["cold_ns_per_step_a"],
                    "warm_ns_per_step": kv["warm_ns_per_step_a"]})
    return out

def table(rows, base):
    builds = []
    for r in rows:
        if r["build"] not in builds:
            builds.append(r["build"])
    print("| workload | build | runs | cold ns/step (median) | warm ns/step (median) | cold / %s, per round: median (rounds above 1) | warm / %s |" % (base, base))
    print("|---|---|---|---|---|---|---|")
    for w in sorted({r["workload"] for r in rows}):
        for b in [base] + [b for b in builds if b != base]:
            mine = [r for r in rows if r["workload"] == w and r["build"] == b]
            cold = [float(r["cold_ns_per_step"]) for r in mine]
            warm = [float(r["warm_ns_per_step"]) for r in mine]
            cells = ["", ""]
            if b != base:
                for i, k in enumerate(["cold_ns_per_step", "warm_ns_per_step"]):
                    ratios = []
                    for key in sorted({(r["rep"], r["round"]) for r in mine}):
                        o = [float(r[k]) for r in mine if (r["rep"], r["round"]) == key]
                        m = [float(r[k]) for r in rows if r["workload"] == w and r["build"] == base
                             and (r["rep"], r["round"]) == key]
                        if o and m:
                            ratios.append(st.median(o) / st.median(m))
                    cells[i] = "%.3f (%d of %d)" % (st.median(ratios), sum(x > 1 for x in ratios), len(ratios))
            print("| %s | %s | %d | %.1f | %.1f | %s | %s |" % (w, b, len(mine), st.median(cold), st.median(warm), cells[0], cells[1]))

if __name__ == "__main__":
    if sys.argv[1] == "csv":
        rows = rows_from_dir(sys.argv[2])
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    else:
        table(list(csv.DictReader(open(sys.argv[2]))), sys.argv[3])
