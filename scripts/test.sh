#!/usr/bin/env bash
# Builds and runs the whole test suite three ways: a warning-free release build
# (-Werror), an AddressSanitizer+UBSan build, and a ThreadSanitizer build of the
# concurrency tests (streams, events, device, executor).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs=$(nproc)
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

build() {  # build <dir> <cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -DLMS_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

echo "== release build and tests"
build build-release -DCMAKE_BUILD_TYPE=Release
ctest --test-dir build-release --output-on-failure -j "$jobs" -LE slow_sanitizer

echo "== AddressSanitizer + UBSan"
build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMS_SANITIZE=address \
  -DLMS_BUILD_BENCH=OFF -DLMS_BUILD_EXAMPLES=OFF
ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow_sanitizer

echo "== ThreadSanitizer (concurrency tests)"
build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLMS_SANITIZE=thread \
  -DLMS_BUILD_BENCH=OFF -DLMS_BUILD_EXAMPLES=OFF
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L concurrency
