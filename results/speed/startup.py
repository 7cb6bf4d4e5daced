# cmp.py N lib1,lib2 CMD...: interleaved runs of CMD natively, with each lib
# preloaded but off, and autostarted; medians of wall, CPU, minor faults.
import os, subprocess, sys, statistics, time, resource
N = int(sys.argv[1]); libs = sys.argv[2].split(','); cmd = sys.argv[3:]
cfgs = [("native", None, False)] + [(f"{l} {m}", l, m == "auto") for l in libs for m in ("off", "auto")]
res = {c[0]: [] for c in cfgs}
for i in range(N):
    for name, lib, auto in cfgs:
        env = dict(os.environ)
        if lib:
            env["LD_PRELOAD"] = lib
        if auto:
            env.update(BREAKDANCE_AUTOSTART="1", BREAKDANCE_OUTPUT="/tmp/su/cmp")
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
        t1 = time.monotonic()
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res[name].append((t1 - t0, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime), r1.ru_minflt - r0.ru_minflt))
print("config,wall_ms,cpu_ms,minor_faults")
for name, r in res.items():
    print(f"{name},{statistics.median(x[0] for x in r)*1e3:.2f},{statistics.median(x[1] for x in r)*1e3:.2f},{statistics.median(x[2] for x in r):.0f}")
