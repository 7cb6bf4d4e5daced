#!/usr/bin/env bash
# Issue 8's stress and fuzz, 20 times each (not in CI).
cd /work/wt-emu
pass=0; fail=0
for i in $(seq 1 20); do
  if timeout 600 cargo test --release --test host -- five_hundred_live_threads thread_exits_and_cancellation_leak_nothing forked_child_is_left_as_it_is_natively dlopened_code_is_traced > /tmp/stress-host-$i.log 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "host run $i failed (rc $?)"; fi
  if timeout 600 cargo test --release --test control_hostile > /tmp/stress-ctl-$i.log 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "control_hostile run $i failed"; fi
done
echo "stress: $pass passed, $fail failed"
