#!/usr/bin/env bash
# Builds and runs the whole test suite three ways: a warning-free release build
# (-Werror), an AddressSanitizer+UBSan build, and a ThreadSanitizer build of the
# concurrency tests (streams, events, device, executor).
#   scripts/test.sh            what CI runs
#   scripts/test.sh --nightly  also the long parity cases (LMS_NIGHTLY=1:
#                              the torchvision models that train for a minute
#                              or more each; every feature keeps a case in CI)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--nightly" ]; then
  export LMS_NIGHTLY=1
elif [ $# -gt 0 ]; then
  echo "usage: scripts/test.sh [--nightly]" >&2
  exit 2
fi
scripts/install_deps.sh
# The real MRI (a 16 MB Debian package) for the tests that train on it; they
# skip with the reason when it cannot be fetched.
scripts/fetch_data.sh --mri-only data ||
  echo "warning: could not fetch data/mri; the tests on the real MRI will skip"
jobs=$(nproc)
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp

# Ninja: it schedules the jobs of all targets together (no recursive make per
# target), which keeps both cores busy to the last link.
# A build folder an earlier version configured for Make is started afresh.
# Each layer library compiles in batches of 8 sources (LMS_UNITY_BUILD): the
# headers (oneDNN, Abseil, protobuf) are parsed once per batch, which halves
# the library's compile time in every tree. Test programs compile one by one.
configure() {  # configure <dir> <cmake args...>
  local dir=$1; shift
  if grep -qs '^CMAKE_GENERATOR:INTERNAL=Unix Makefiles' "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  cmake -S . -B "$dir" -G Ninja -DLMS_WERROR=ON -DLMS_UNITY_BUILD=ON "$@" >/dev/null
}
build() {  # build <dir> <cmake args...>
  configure "$@"
  cmake --build "$1" -j "$jobs"
}

echo "== release build and tests"
build build-release -DCMAKE_BUILD_TYPE=Release
ctest --test-dir build-release --output-on-failure -j "$jobs"

# The sanitizer builds compile at -O1 with line tables only (-g1): what the
# sanitizers' reports need, at a third of -O2 -g's compile time.
sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

echo "== AddressSanitizer + UBSan"
build build-asan "${sanitizer_flags[@]}" -DLMS_SANITIZE=address \
  -DLMS_BUILD_BENCH=OFF -DLMS_BUILD_EXAMPLES=OFF
# The planner-shape tests' scaled-workspace runs (label workspace_scale) and
# the whole-model PyTorch parity tests (label slow_sanitizer) ran in the
# release build; under ASan they would repeat it about 10x slower.
ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE 'slow_sanitizer|workspace_scale'

echo "== ThreadSanitizer (concurrency tests)"
# Only the test programs labelled "concurrency" (tests/lms_tests.cmake: file
# names with stream, event, device, executor or session) are built and run.
configure build-tsan "${sanitizer_flags[@]}" -DLMS_SANITIZE=thread \
  -DLMS_BUILD_BENCH=OFF -DLMS_BUILD_EXAMPLES=OFF
mapfile -t tsan_targets < <(find tests -name '*_test.cc' -not -path '*/cuda/*' |
  grep -E 'stream|event|device|executor|session' | xargs -n1 basename | sed 's/\.cc$//')
cmake --build build-tsan -j "$jobs" --target "${tsan_targets[@]}"
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L concurrency
