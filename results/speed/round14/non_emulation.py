#!/usr/bin/env python3
"""Per workload and build of a device.sh output directory: the handlers' time
per sample that is not emulation ((sampling_ns + breakpoint_ns -
emulation_ns) / samples), median and least over the runs, and the whole
handler time per sample."""
import json,glob,sys,statistics as st,collections,re
d=collections.defaultdict(list)
for f in glob.glob(sys.argv[1]+'/*.json'):
    m=re.match(r'(.*)-(\d+)-(\w+)\.json',f.split('/')[-1])
    if not m: continue
    s=json.load(open(f)); c=s.get('counters',s)
    n=c['samples']
    if not n: continue
    d[(m[1],m[3])].append(((c['sampling_ns']+c['breakpoint_ns']-c['emulation_ns'])/n/1e3, (c['sampling_ns']+c['breakpoint_ns'])/n/1e3))
for k in sorted(d):
    v=d[k]; print(k, 'non-emulation µs/sample median %.1f (min %.1f)'%(st.median(x for x,_ in v),min(x for x,_ in v)), ' handler µs/sample %.1f'%st.median(y for _,y in v), len(v))
