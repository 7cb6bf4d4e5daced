"""Medians of heap.csv per setting and build: CPU over native (each run's
user + system against the same round's native run), CPU over the first
build named on the command line in the same round, peak RSS, the
worker's CPU and the start and stop.
usage: python3 heap.py heap.csv BASE_BUILD"""
import csv, statistics, sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
cpu = lambda r: float(r["user_s"]) + float(r["sys_s"])
native = {(r["setting"], r["round"]): cpu(r) for r in rows if r["build"] == "native"}
base = {(r["setting"], r["round"]): cpu(r) for r in rows if r["build"] == sys.argv[2]}
by = defaultdict(list)
for r in rows:
    by[(r["setting"], r["build"])].append(r)
print(f"| setting | build | runs | CPU over native | CPU over {sys.argv[2]} | peak RSS (MB) | worker ms | start+stop ms | traces |")
print("|---|---|---|---|---|---|---|---|---|")
for (setting, build), rs in sorted(by.items()):
    med = lambda f: statistics.median(f(r) for r in rs)
    rss = med(lambda r: int(r["maxrss_kb"])) / 1024
    if build == "native":
        print(f"| {setting} | native | {len(rs)} | {med(cpu):.3f} s | | {rss:.1f} | | | |")
        continue
    ratio = med(lambda r: cpu(r) / native[(setting, r["round"])])
    over = med(lambda r: cpu(r) / base[(setting, r["round"])])
    print(f"| {setting} | {build} | {len(rs)} | {ratio:.3f}x | {over:.3f} | {rss:.1f} | "
          f"{med(lambda r: int(r['worker_ns'])) / 1e6:.2f} | {med(lambda r: int(r['start_stop_ns'])) / 1e6:.2f} | "
          f"{med(lambda r: int(r['traces_written'])):.0f} |")
