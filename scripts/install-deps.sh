#!/usr/bin/env bash
# Installs the system packages breakdance's tests, demo, experiments and
# scripts use, when they are missing. Safe to run again; it installs nothing
# that is there.
#
#   scripts/install-deps.sh           install what is missing
#   scripts/install-deps.sh --check   install nothing; fail when a tool the
#                                     sources run is not in TOOLS below, when
#                                     its package is neither installed by this
#                                     script nor part of every Debian system,
#                                     or when it is not on PATH
#
# INSTALL_DEPS_ROOT names the source tree --check reads (default: the
# checkout this script is in; the tests point it at altered copies).
set -euo pipefail

# Every executable the sources run, and the Debian package that provides it.
# Keep it in step with the code: --check (run by scripts/test.sh) finds the
# tools the Rust sources and the scripts call and fails on any not listed.
TOOLS=(
    clang-19:clang-19
    llvm-profgen-19:llvm-19
    llvm-profdata-19:llvm-19
    llvm-bolt-19:bolt-19
    create_llvm_prof:autofdo
    valgrind:valgrind
    musl-gcc:musl-tools
    dpkg-source:dpkg-dev
    tclsh:tcl
    xz:xz-utils
    python3:python3
    make:make
    gcc:gcc
    cc:gcc
    as:binutils
    ld:binutils
    ld.gold:binutils
    ld.lld-19:lld-19
    nm:binutils
    objcopy:binutils
    tar:tar
    apt-get:apt
    sh:dash
    bash:bash
    sleep:coreutils
    awk:mawk
    setpriv:util-linux
    setarch:util-linux
    node:nodejs
    java:default-jre-headless
    ld.so:libc-bin
    ldd:libc-bin
)
# Packages this script installs when missing.
PACKAGES=(clang-19 llvm-19 lld-19 bolt-19 autofdo valgrind musl-tools dpkg-dev xz-utils tcl util-linux python3 make gcc binutils nodejs default-jre-headless)
# Packages every Debian system has (Essential or Priority: required).
BASE=(apt bash dash tar mawk coreutils libc-bin)
# Programs that are not Debian packages: the Rust toolchain, and the
# workspace's own binaries.
NOT_PACKAGES=(cargo rustup rustc profiler-ctl bench-harness brr-run brr-instrument brr-experiment)

root=${INSTALL_DEPS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

package_of() {
    local entry
    for entry in "${TOOLS[@]}"; do
        [ "${entry%%:*}" = "$1" ] && { echo "${entry#*:}"; return 0; }
    done
    return 1
}

contains() {
    local want=$1 item
    shift
    for item in "$@"; do [ "$item" = "$want" ] && return 0; done
    return 1
}

# Names of the executables the sources run: in Rust, the literal program of
# Command::new / Cmd::new and the tool lookups (require, require_tool, tool,
# have_tool, find_tool); in the scripts, every versioned LLVM tool (NAME-19)
# and AutoFDO's create_llvm_prof (this script, which names packages, aside).
# Paths count by their basename; /nonexistent/... is a test's missing program.
called_tools() {
    {
        find "$root" -path "$root/target" -prune -o -name '*.rs' -print0 |
            xargs -0 grep -ohE '\b(Command|Cmd)::new\("[^"]+"\)|\b(require|require_tool|tool|have_tool|find_tool)\("[^"]+"' |
            sed -E 's/.*\("([^"]+)".*/\1/' | grep -v '^/nonexistent/' || true
        find "$root/scripts" "$root/.ci" -type f \( -name '*.sh' -o -name run \) ! -name install-deps.sh -print0 |
            xargs -0 grep -ohE '\b[a-z][a-z0-9_]*(-[a-z0-9_]+)*-19\b|\bcreate_llvm_prof\b' || true
    } | sed 's#.*/##' | sort -u
}

check() {
    local failed=0 tool package
    for tool in $(called_tools); do
        contains "$tool" "${NOT_PACKAGES[@]}" && continue
        if ! package=$(package_of "$tool"); then
            echo "install-deps --check: the sources run '$tool', which TOOLS in scripts/install-deps.sh does not list" >&2
            failed=1
        fi
    done
    for entry in "${TOOLS[@]}"; do
        tool=${entry%%:*}
        package=${entry#*:}
        if ! contains "$package" "${PACKAGES[@]}" "${BASE[@]}"; then
            echo "install-deps --check: '$tool' comes from package $package, which nothing installs (add it to PACKAGES)" >&2
            failed=1
        elif ! command -v "$tool" >/dev/null; then
            echo "install-deps --check: '$tool' (package $package) is not on PATH: run scripts/install-deps.sh" >&2
            failed=1
        fi
    done
    if [ "$failed" -ne 0 ]; then
        exit 1
    fi
    echo "install-deps --check: every tool the sources run comes from an installed package (${#TOOLS[@]} tools)" >&2
}

if [ "${1:-}" = "--check" ]; then
    check
    exit 0
elif [ $# -gt 0 ]; then
    echo "usage: scripts/install-deps.sh [--check]" >&2
    exit 2
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}" >&2
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
    target=/etc/apt/sources.list.d/breakdance-src.sources
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$target" >/dev/null
    elif [ -f /etc/apt/sources.list ]; then
        grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $SUDO tee "${target%.sources}.list" >/dev/null
    fi
    echo "install-deps: added deb-src entries for Debian source packages ($target)" >&2
    $SUDO apt-get update -qq
fi
