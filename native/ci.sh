#!/usr/bin/env bash
# Native CI for the MobiEdit ZO engine (run from anywhere; `make native-test` calls it).
#   (a) host build + CTest under AddressSanitizer + UndefinedBehaviorSanitizer
#   (b) aarch64 cross build (g++-aarch64-linux-gnu) + CTest under qemu-user
# Installs missing Debian packages itself (apt-get update only if something is missing).
# Exits non-zero on any failure. Build trees: build/native-asan, build/native-aarch64.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
PACKAGES=(cmake g++ doctest-dev g++-aarch64-linux-gnu qemu-user)

log() { printf '\n== native/ci.sh: %s\n' "$*"; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]}"
  local sudo=()
  [[ "$(id -u)" == 0 ]] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure + build + ctest one tree: build_and_test NAME [cmake args...]
build_and_test() {
  local dir="$BUILD/$1"
  shift
  cmake -S "$ROOT/native" -B "$dir" -G Ninja -DMOBIEDIT_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS"
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$JOBS"
}

check_arch() {  # check_arch FILE PATTERN: the binary really is for the target
  local desc
  desc="$(LC_ALL=C readelf -h "$1" | grep 'Machine:')"
  [[ "$desc" == *"$2"* ]] || { echo "unexpected architecture for $1: $desc" >&2; exit 1; }
}

main() {
  local t0=$SECONDS
  ensure_packages

  log "host build, AddressSanitizer + UBSan"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  build_and_test native-asan -DCMAKE_BUILD_TYPE=Debug -DMOBIEDIT_SANITIZE=ON

  log "aarch64 cross build, run under qemu-aarch64"
  build_and_test native-aarch64 -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/native/cmake/aarch64-linux-gnu.cmake"
  check_arch "$BUILD/native-aarch64/tests/test_engine" AArch64
  check_arch "$BUILD/native-aarch64/libmobiedit.so" AArch64

  log "all native tests passed in $((SECONDS - t0)) s"
}

main "$@"
