#!/usr/bin/env python3
"""Tables from results/tails/device.sh's output directory (runs.csv and
each run's summary.json): medians over the rounds, ratios taken within a
round (each build against that round's native run)."""
import csv, json, os, statistics as st, sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "device")
rows = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
cpu = lambda r: float(r["user_s"]) + float(r["sys_s"])


def summary(r):
    p = os.path.join(out, "%s-%s-%s-%s.json" % (r["part"], r["setting"], r["round"], r["build"]))
    return json.load(open(p)) if os.path.exists(p) else None


def native(r):
    return next(n for n in rows if (n["part"], n["setting"], n["round"], n["build"])
                == (r["part"], r["setting"], r["round"], "native"))


def per(s, key, by):
    return s[key] / max(1, s[by])


print("| workload | setting | build | CPU over native | ns per step run | steps run per kept | stops per trace | proven tails per trace | handler µs per trace | emulation µs per trace | extra CPU per trace (µs) | branches per µs of extra CPU | mismatches (reg/mem) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
seen = []
for r in rows:
    if (r["part"], r["setting"]) not in seen:
        seen.append((r["part"], r["setting"]))
for part, setting in seen:
    for build in ("before", "after"):
        rs = [r for r in rows if (r["part"], r["setting"], r["build"]) == (part, setting, build)]
        ss = [summary(r) for r in rs]
        pairs = [(r, s) for r, s in zip(rs, ss) if s]
        if not pairs:
            continue
        med = lambda f: st.median(f(r, s) for r, s in pairs)
        ratio = med(lambda r, s: cpu(r) / cpu(native(r)))
        extra = med(lambda r, s: (cpu(r) - cpu(native(r))) / max(1, s["traces_started"]) * 1e6)
        bpus = med(lambda r, s: s["entries_recorded"] / max(1e-9, (cpu(r) - cpu(native(r))) * 1e6))
        run = med(lambda r, s: per(s, "emulation_ns", "emulated_steps_run"))
        s_run = med(lambda r, s: per(s, "emulated_steps_run", "emulated_steps"))
        stops = med(lambda r, s: per(s, "breakpoints", "traces_started"))
        tails = med(lambda r, s: per(s, "proven_tails", "traces_started") if "proven_tails" in s else 0)
        handler = med(lambda r, s: (s["sampling_ns"] + s["breakpoint_ns"]) / max(1, s["traces_started"]) / 1e3)
        emu = med(lambda r, s: s["emulation_ns"] / max(1, s["traces_started"]) / 1e3)
        mism = "%d/%d" % (sum(s["speculation_mismatch_registers"] for _, s in pairs),
                          sum(s["speculation_mismatch_memory"] for _, s in pairs))
        print(f"| {part} | {setting} | {build} | {ratio:.3f}× | {run:.0f} | {s_run:.2f} | {stops:.2f} | {tails:.2f} | {handler:.0f} | {emu:.0f} | {extra:.0f} | {bpus:.2f} | {mism} |")
    nat = [r for r in rows if (r["part"], r["setting"], r["build"]) == (part, setting, "native")]
    print(f"| {part} | {setting} | native | {st.median(cpu(r) for r in nat):.3f} s | | | | | | | | | |")

# What emulation costs beyond its own time (SQLite, 128 branches, 3 ms):
# per sample, (CPU with emulate-only samples - CPU with sample-only
# samples) - the emulation's own time.
rs = {b: [r for r in rows if (r["part"], r["setting"], r["build"]) == ("sqlite", "128-3ms", b)]
      for b in ("native", "sample-only", "emulate-only", "after")}
if rs["sample-only"] and rs["emulate-only"]:
    rounds = sorted({r["round"] for r in rs["emulate-only"]})
    def pick(b, rd):
        return next(r for r in rs[b] if r["round"] == rd)
    sample_cost, emu_extra, emu_own, after_cost = [], [], [], []
    for rd in rounds:
        n, so, eo, full = (pick(b, rd) for b in ("native", "sample-only", "emulate-only", "after"))
        s_so, s_eo, s_full = summary(so), summary(eo), summary(full)
        sample_cost.append((cpu(so) - cpu(n)) / s_so["samples"] * 1e6)
        emu_extra.append((cpu(eo) - cpu(so)) / s_eo["samples"] * 1e6)
        emu_own.append(s_eo["emulation_ns"] / s_eo["samples"] / 1e3)
        after_cost.append((cpu(full) - cpu(n)) / s_full["samples"] * 1e6)
    print("\nSQLite at (128, 3 ms), µs of application CPU per sample (medians of %d rounds):\n" % len(rounds))
    print("| part | µs per sample |")
    print("|---|---|")
    print(f"| a sample that does nothing (sample-only − native) | {st.median(sample_cost):.0f} |")
    print(f"| emulating one segment (emulate-only − sample-only) | {st.median(emu_extra):.0f} |")
    print(f"| of which the emulation's own time (emulation_ns) | {st.median(emu_own):.0f} |")
    print(f"| the rest: the application slower after the handler | {st.median(e - o for e, o in zip(emu_extra, emu_own)):.0f} |")
    print(f"| a whole trace (after − native) | {st.median(after_cost):.0f} |")
print(f"\n{len(rows)} runs; machine: " + " / ".join(open(os.path.join(out, "machine.txt")).read().split("\n")[:4]))
