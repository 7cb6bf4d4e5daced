#!/usr/bin/env bash
# Installs the system packages breakdance's tests, demo and experiments use,
# when they are missing. Safe to run again; it installs nothing that is there.
set -euo pipefail

packages=(clang-19 llvm-19 lld-19 autofdo valgrind musl-tools dpkg-dev xz-utils tcl)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
