#!/usr/bin/env python3
"""Medians (and quartiles) of stop.sh's runs.csv per build: the start and
stop's CPU (start_stop_ns), the handlers' and the worker's, ns per
emulated step and per decode where the file has them, and each round's
start-and-stop difference against the first build named."""
import csv
import statistics as st
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
builds = list(dict.fromkeys(r["build"] for r in rows if r["build"] != "native"))


def q(v):
    v = sorted(v)
    qs = st.quantiles(v, n=4)
    return "%.2f (%.2f-%.2f)" % (st.median(v), qs[0], qs[2])


steps = "steps" in rows[0]
rss = "maxrss_kb" in rows[0]
print("| build | runs | start and stop ms | handlers ms | worker ms | traces |%s%s" % (
    " peak RSS (MB) |" if rss else "",
    " ns per step | ns per decode | decodes per 100 steps |" if steps else ""))
print("|---|---|---|---|---|---|%s%s" % ("---|" if rss else "", "---|---|---|" if steps else ""))
for b in builds:
    r = [x for x in rows if x["build"] == b]
    line = "| %s | %d | %s | %s | %s | %d |" % (
        b, len(r), q([float(x["start_stop_ms"]) for x in r]),
        q([float(x["sampling_ms"]) for x in r]), q([float(x["worker_ms"]) for x in r]),
        st.median(int(x["traces"]) for x in r))
    if rss:
        line += " %.1f |" % (st.median(int(x["maxrss_kb"]) for x in r) / 1024)
    if steps:
        line += " %s | %s | %.1f |" % (
            q([1e6 * float(x["emulation_ms"]) / max(1, int(x["steps"])) for x in r]),
            q([1e6 * float(x["decode_ms"]) / max(1, int(x["decodes"])) for x in r]),
            st.median(100 * int(x["decodes"]) / max(1, int(x["steps"])) for x in r))
    print(line)
base = builds[0]
for b in builds[1:]:
    d = []
    for rnd in sorted(set(x["round"] for x in rows)):
        a = [float(x["start_stop_ms"]) for x in rows if x["round"] == rnd and x["build"] == base]
        c = [float(x["start_stop_ms"]) for x in rows if x["round"] == rnd and x["build"] == b]
        if a and c:
            d.append(c[0] - a[0])
    print()
    print("%s - %s, start and stop, per round: median %.2f ms, %d of %d rounds lower" % (
        b, base, st.median(d), sum(1 for x in d if x < 0), len(d)))
