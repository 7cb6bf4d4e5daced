#!/bin/bash
# Part of results/tails: what starting the library costs a process that is
# never sampled (a 10 s period), against the process alone, on SQLite.
# Output: results/tails/fixed.txt (run on the 2-core machine).
# fixed.sh LIB ROUNDS: native vs started-with-no-samples, CPU and maxrss
S=$(dirname "$0")/../../target/workloads/build/sqlite/baseline/speedtest1
R=$(dirname "$0")/../../target/device2/rusage
for i in $(seq 1 $2); do
  echo "native $($R $S --memdb --testset main --size 25)"
  rm -rf /tmp/omf
  echo "started $($R env BREAKDANCE_MEASURE=sample-only BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=10000000000 BREAKDANCE_OUTPUT=/tmp/omf LD_PRELOAD=$1 $S --memdb --testset main --size 25)"
done | python3 -c "
import sys,statistics as st
d={}
for l in sys.stdin:
    k,u,s,r,rc=l.split()
    d.setdefault(k,[]).append((float(u)+float(s),int(r)))
for k,v in sorted(d.items()):
    c=[x[0] for x in v]; print(k, \"median %.3f min %.3f rss %d kB\" % (st.median(c), min(c), st.median(x[1] for x in v)))
"
