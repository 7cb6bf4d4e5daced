#!/usr/bin/env python3
"""Decoding's share of the handler, per build, from device.sh's output
directory: medians over the rounds of each run's counters."""
import glob, json, os, statistics as st, sys

out = sys.argv[1] if len(sys.argv) > 1 else "target/device/out-quick"
runs = {}
for path in glob.glob(os.path.join(out, "*.json")):
    name = os.path.basename(path)[:-5]
    if name.startswith("verify-"):
        continue
    # WORKLOAD-SETTING-ROUND-BUILD.json
    parts = name.split("-")
    key = ("-".join(parts[:-2]), parts[-1])
    runs.setdefault(key, []).append(json.load(open(path)))
print("| workload, setting | build | runs | ns per decode | decodes per 100 steps run | decoding % of emulation | ns per step run | emulation µs per trace |")
print("|---|---|---|---|---|---|---|---|")
for (ws, build), ss in sorted(runs.items()):
    m = lambda f: st.median([f(s) for s in ss])
    print(
        f"| {ws} | {build} | {len(ss)} | {m(lambda s: s['decode_ns'] / max(1, s['emulation_decodes'])):.0f} "
        f"| {m(lambda s: 100 * s['emulation_decodes'] / max(1, s['emulated_steps_run'])):.1f} "
        f"| {m(lambda s: 100 * s['decode_ns'] / max(1, s['emulation_ns'])):.1f} "
        f"| {m(lambda s: s['emulation_ns'] / max(1, s['emulated_steps_run'])):.0f} "
        f"| {m(lambda s: s['emulation_ns'] / 1e3 / max(1, s['traces_completed'])):.0f} |"
    )
