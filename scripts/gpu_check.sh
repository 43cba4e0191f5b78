#!/usr/bin/env bash
# The first run on a GPU machine, in one command:
#   1. the GPU, its driver and the CUDA toolkit;
#   2. a release build with the CUDA backend for one architecture (sm_90 for
#      H100/H200 by default);
#   3. the CUDA tests with LMS_REQUIRE_CUDA=1, so a missing device or a driver
#      too old for CUDA 13 is a failure, not a green run of skips;
#   4. compute-sanitizer memcheck and racecheck on the kernel tests, and the
#      reduction benchmark (achieved bytes/s against the memory bandwidth);
#   5. LMS runs of VDSR and the 3-D U-Net on --device cuda with --trace, and
#      each run's profile summary (copy/compute overlap, stall, issue lead).
# It ends with one summary a person can read; every step's log is in the
# output folder. Exit status 0 only when every step passed.
#
# usage: scripts/gpu_check.sh [--arch 90] [--build-dir build-gpu] [--out gpu-check]
#                             [--skip-build] [--quick]
#   --skip-build  use the binaries already in --build-dir (built elsewhere)
#   --quick       smaller LMS runs (no limit search), for a short lease
# LMS_GPU_TIMEOUT (seconds, default 1200) bounds each test program and run, so
# a hang is a failure with its log, not a lost lease.
set -uo pipefail

cd "$(dirname "$0")/.."
arch=90
build=build-gpu
out=gpu-check
skip_build=0
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

t_limit=${LMS_GPU_TIMEOUT:-1200}
# bounded CMD...: CMD, killed after $t_limit seconds (exit 124 = timed out).
bounded() { timeout -k 10 "$t_limit" "$@"; }

results=()
failed=0
# step NAME LOG CMD...: runs CMD with its output in $out/LOG, records the result.
step() {
  local name="$1" log="$out/$2"
  shift 2
  local t0=$SECONDS
  echo "== $name"
  "$@" >"$log" 2>&1
  local rc=$?
  local verdict=PASS
  [ $rc -eq 0 ] || { verdict="FAIL (exit $rc)"; failed=1; }
  results+=("$(printf '%-44s %-16s %4ds  %s' "$name" "$verdict" $((SECONDS - t0)) "${log#"$out"/}")")
  [ $rc -eq 0 ] || tail -n 20 "$log"
  return $rc
}

gpu_info() {
  command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: no NVIDIA driver"; return 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
    --format=csv || return 1
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | head -n 2
  lscpu | grep -E 'Model name|^CPU\(s\)'
}

build_gpu() {
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLMS_WERROR=ON \
    -DLMS_CUDA_ARCHITECTURES="$arch" || return 1
  grep -q 'LMS_CUDA_ARCHITECTURES:STRING=' "$build/CMakeCache.txt" || {
    echo "the CUDA backend was not configured (nvcc or cuDNN missing; see the cmake output)"
    return 1
  }
  cmake --build "$build" -j "$(nproc)"
}

# The CUDA tests, and the tests that take --device cuda, with every skip a failure.
cuda_tests() {
  local rc=0 t
  for t in "$build"/tests/backend/cuda/*_test "$build"/tests/gpu/*_test; do
    [ -x "$t" ] || continue
    echo "--- $t"
    LMS_REQUIRE_CUDA=1 bounded "$t" || rc=1
  done
  echo "--- vdsr_test (--device cuda)"
  LMS_REQUIRE_CUDA=1 bounded "$build/tests/examples/vdsr_test" --gtest_filter='VdsrErrorsTest.*' || rc=1
  return $rc
}

sanitize() {
  local tool="$1" rc=0 t
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  for t in "$build"/tests/backend/cuda/cuda_kernels_test "$build"/tests/backend/cuda/cuda_device_test; do
    echo "--- $tool $t"
    LMS_REQUIRE_CUDA=1 bounded compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" || rc=1
  done
  return $rc
}

lms_runs() {
  local model="$1" sizes="$2" capacity="$3" extra=()
  [ $quick -eq 1 ] && extra+=(--no-search)
  bounded "$build/bench/lms-bench" "$model" --device cuda "$sizes" --capacity "$capacity" --steps 3 \
    --trace "$out/trace_$model" --json "$out/$model.json" "${extra[@]}" || return 1
  local f
  for f in "$out/trace_$model"/*.summary.txt; do
    echo "--- $(basename "$f")"
    cat "$f"
  done
}

step "GPU, driver, toolkit" gpu.log gpu_info
if [ $skip_build -eq 0 ]; then
  step "build (sm_$arch, -Werror)" build.log build_gpu
fi
if [ -x "$build/bench/lms-bench" ] && [ -d "$build/tests/backend/cuda" ]; then
  step "CUDA tests (LMS_REQUIRE_CUDA=1)" cuda_tests.log cuda_tests
  step "compute-sanitizer memcheck" memcheck.log sanitize memcheck
  step "compute-sanitizer racecheck" racecheck.log sanitize racecheck
  step "reductions: bytes/s vs peak bandwidth" reduce_bench.log bounded "$build/bench/cuda_reduce_bench"
  step "lms-bench vdsr --device cuda" vdsr.log lms_runs vdsr "--batch=32,256" 1GiB
  step "lms-bench unet3d --device cuda" unet3d.log lms_runs unet3d "--size=64,128" 1GiB
else
  results+=("no CUDA build in $build: tests and runs not attempted")
  failed=1
fi

echo
echo "==================== gpu_check summary ===================="
head -n 2 "$out/gpu.log" | tail -n 1
for r in "${results[@]}"; do echo "$r"; done
if [ -f "$out/reduce_bench.log" ]; then
  echo "--- reductions (cuda_reduce_bench)"
  tail -n 20 "$out/reduce_bench.log"
fi
for m in vdsr unet3d; do
  [ -f "$out/$m.log" ] || continue
  echo "--- lms-bench $m --device cuda"
  grep -E ' [|] |^-+[+]|largest|limit|x in ' "$out/$m.log"
  for f in "$out/trace_$m"/*_lms_on.summary.txt; do
    [ -f "$f" ] || continue
    echo "  $(basename "$f" .summary.txt):" \
      "$(grep -E 'step time|copy/compute overlap|stall time|host issue lead \(median\)' "$f" |
        sed -E 's/  +/ /g' | paste -sd ';' -)"
  done
done
echo "logs: $out"
exit $failed
