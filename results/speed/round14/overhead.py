#!/usr/bin/env python3
"""Reads overhead.sh's runs.csv: per setting and build, the CPU (user +
sys) over native's in the same round, as the median of the rounds'
ratios with a bootstrap 95% interval of that median, and the ratio of
two builds' medians of CPU in the same rounds."""
import csv, random, statistics as st, sys, collections

rows = list(csv.DictReader(open(sys.argv[1])))
cpu = collections.defaultdict(dict)
for r in rows:
    if r["rc"] != "0":
        continue
    cpu[(r["setting"], r["round"])][r["build"]] = float(r["user_s"]) + float(r["sys_s"])
settings = sorted({s for s, _ in cpu})
builds = [b for b in dict.fromkeys(r["build"] for r in rows) if b != "native"]
random.seed(1)
def ci(xs):
    meds = sorted(st.median(random.choices(xs, k=len(xs))) for _ in range(2000))
    return meds[50], meds[1949]
print("| setting | build | rounds | CPU over native (median) | 95% interval | native CPU (median s) |")
print("|---|---|---|---|---|---|")
for s in settings:
    rounds = [v for (ss, _), v in sorted(cpu.items()) if ss == s]
    for b in builds:
        ratios = [v[b] / v["native"] for v in rounds if b in v and "native" in v]
        lo, hi = ci(ratios)
        nat = st.median(v["native"] for v in rounds if "native" in v)
        print(f"| {s} | {b} | {len(ratios)} | {st.median(ratios):.3f}× | {lo:.3f}–{hi:.3f} | {nat:.3f} |")
if len(builds) >= 2:
    print()
    print("| setting | builds | rounds | CPU ratio, same round (median) | 95% interval |")
    print("|---|---|---|---|---|")
    for s in settings:
        rounds = [v for (ss, _), v in sorted(cpu.items()) if ss == s]
        a = builds[0]
        for b in builds[1:]:
            ratios = [v[b] / v[a] for v in rounds if a in v and b in v]
            lo, hi = ci(ratios)
            print(f"| {s} | {b} / {a} | {len(ratios)} | {st.median(ratios):.3f} | {lo:.3f}–{hi:.3f} |")
