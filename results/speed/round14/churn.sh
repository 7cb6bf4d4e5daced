#!/usr/bin/env bash
# The churn of 1,000 short threads (results/speed/device.sh's, at 128
# branches and 10 ms) under the builds in BUILDS (directories of
# target/device), ROUNDS (default 8) rounds in turns: per run the build,
# the process's user and system CPU, the traced threads' CPU (ms),
# samples, samples dropped in a handler and the handlers' time (ms).
set -u
D=target/device
for r in $(seq 1 "${ROUNDS:-8}"); do
  for b in ${BUILDS:-base head}; do
    rm -rf "$D/tmp-churn"
    line=$("$D/rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=10000000 \
      BREAKDANCE_LBR=128 BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$D/tmp-churn" \
      LD_PRELOAD="$PWD/$D/$b/libbreakdance.so" "$D/short_threads" 1000 50 50)
    python3 -c "
import json
c = json.load(open('$D/tmp-churn/summary.json'))
u, s = '$line'.split()[:2]
print('$b', u, s, c['threads_cpu_ns'] // 1000000, c['samples'], c.get('samples_in_handler', '-'), '%.2f' % (c['sampling_ns'] / 1e6))"
  done
done
rm -rf "$D/tmp-churn"
