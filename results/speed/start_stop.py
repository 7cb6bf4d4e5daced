# ssi.py N lib1,lib2 CMD...: interleaved autostarted runs; medians of summary.json's
# start_stop_ns, worker_ns, sampling_ns per library.
import os, subprocess, sys, statistics, json, shutil
N = int(sys.argv[1]); libs = sys.argv[2].split(','); cmd = sys.argv[3:]
vals = {l: [] for l in libs}
for i in range(N):
    for l in libs:
        shutil.rmtree("/tmp/su/ss", ignore_errors=True)
        env = dict(os.environ, LD_PRELOAD=l, BREAKDANCE_AUTOSTART="1", BREAKDANCE_OUTPUT="/tmp/su/ss")
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
        d = json.load(open("/tmp/su/ss/summary.json"))
        vals[l].append((d.get("start_stop_ns", 0), d["worker_ns"], d["sampling_ns"]))
print("library,runs,start_stop_ms,worker_ms,sampling_ms")
for l, v in vals.items():
    med = lambda k: statistics.median(x[k] for x in v) / 1e6
    print(f"{l},{len(v)},{med(0):.3f},{med(1):.3f},{med(2):.3f}")
