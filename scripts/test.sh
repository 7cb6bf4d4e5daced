#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages, formatting, lints,
# a release build of the workspace (the end-to-end tests run the real
# libbreakdance.so and profiler-ctl from target/release), then every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
if ! command -v cargo >/dev/null; then
    echo "test.sh: cargo is missing: install a Rust toolchain (https://rustup.rs) and run again" >&2
    exit 1
fi
rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --release -- -D warnings
echo "== cargo build --release" >&2
cargo build --release --workspace
echo "== cargo test --release" >&2
# Libraries, binaries and integration tests (benches are measured with
# `cargo bench`, not run as tests). A closing line totals every test binary.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --release --workspace --lib --bins --tests 2>&1 | tee "$log"
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
