#!/usr/bin/env bash
# Installs the system packages breakdance's tests, demo and experiments use,
# when they are missing. Safe to run again; it installs nothing that is there.
set -euo pipefail

packages=(clang-19 llvm-19 lld-19 autofdo valgrind musl-tools dpkg-dev xz-utils tcl util-linux)
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

# Source packages (the experiments and the brr tests build third-party
# programs from Debian sources): add deb-src entries mirroring the binary
# ones when none exist, and refresh the lists.
has_src() {
    grep -rqsE '^[[:space:]]*deb-src[[:space:]]|^Types:.*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/
}
if ! has_src; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    target=/etc/apt/sources.list.d/breakdance-src.sources
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$target" >/dev/null
    elif [ -f /etc/apt/sources.list ]; then
        grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $SUDO tee "${target%.sources}.list" >/dev/null
    fi
    echo "install-deps: added deb-src entries for Debian source packages ($target)" >&2
    $SUDO apt-get update -qq
fi
