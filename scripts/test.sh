#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages (and the check that
# every tool the sources run is installed by them), formatting, lints, a
# release build of the workspace (the end-to-end tests run the real
# libbreakdance.so and profiler-ctl from target/release), then every test
# binary, each one run even when an earlier one failed. Ends with the line
# "N passed, N failed" and a non-zero status when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/install-deps.sh --check
if ! command -v cargo >/dev/null; then
    echo "test.sh: cargo is missing: install a Rust toolchain (https://rustup.rs) and run again" >&2
    exit 1
fi
rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --release -- -D warnings
# The measurement builds: the handler's working set (census) and the
# paired timing (paired).
cargo clippy -p breakdance --lib --tests --release --features census -- -D warnings
cargo clippy -p breakdance --lib --tests --release --features paired -- -D warnings
echo "== cargo build --release" >&2
cargo build --release --workspace
echo "== cargo test --release --no-fail-fast" >&2
# Libraries, binaries and integration tests (benches are measured with
# `cargo bench`, not run as tests). --no-fail-fast runs every test binary
# even after one fails; the closing line totals them all.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --workspace --lib --bins --tests --no-fail-fast 2>&1 | tee "$log" || status=$?
# The census's own test (it is compiled only in that build; the test build
# leaves target/release/libbreakdance.so as it was).
cargo test --release -p breakdance --lib --features census -- census:: 2>&1 | tee -a "$log" || status=$?
# A test binary that started ("Running ...") but printed no result line
# crashed: it counts as one failure.
awk '/^ +Running / { binaries++ }
     /^test result:/ { results++; for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f + binaries - results }' "$log"
if [ "$status" -ne 0 ]; then
    echo "test.sh: cargo test failed (status $status); the failing tests are listed above" >&2
fi
exit "$status"
