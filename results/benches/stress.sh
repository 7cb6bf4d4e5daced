#!/usr/bin/env bash
# Issue 8's stress and fuzz, 20 rounds (not in CI): per round the host tests
# that stress threads, fds, fork, dlopen and code taken away under the
# look-ahead, then control_hostile (10^5 fuzz requests, idle and slow
# clients, then a full session). Logs go to $LOGS (default /tmp).
set -u
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
LOGS=${LOGS:-/tmp}
cargo build --release --workspace || exit 1
pass=0; fail=0
for i in $(seq 1 20); do
  if timeout 600 cargo test --release --test host -- five_hundred_live_threads \
      thread_exits_and_cancellation_leak_nothing forked_child_is_left_as_it_is_natively \
      dlopened_code_is_traced code_taken_away_under_the_lookahead \
      > "$LOGS/stress-host-$i.log" 2>&1; then
    pass=$((pass+1))
  else
    fail=$((fail+1)); echo "host round $i failed: $LOGS/stress-host-$i.log"
  fi
  if timeout 600 cargo test --release --test control_hostile > "$LOGS/stress-ctl-$i.log" 2>&1; then
    pass=$((pass+1))
  else
    fail=$((fail+1)); echo "control_hostile round $i failed: $LOGS/stress-ctl-$i.log"
  fi
done
echo "stress: $pass passed, $fail failed"
