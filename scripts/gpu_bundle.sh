#!/usr/bin/env bash
# Packs a CUDA build of lms for a GPU machine that has the NVIDIA driver,
# the CUDA runtime, cuDNN and NCCL but not the Debian -dev packages lms builds
# against (oneDNN, Abseil, fmt, ...): the CUDA test programs, lms-bench,
# time_model_bench, cuda_reduce_bench, the vdsr example, liblms, and every
# shared library they load except glibc, libstdc++/libgcc and CUDA's own,
# into one archive. scripts/gpu_run_bundle.sh unpacks it there and runs
# scripts/gpu_check.sh --skip-build on it.
#
# usage: scripts/gpu_bundle.sh [--build-dir build-release] [--out gpu-bundle.tar.xz]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-release
out=gpu-bundle.tar.xz
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -d "$build/tests/backend/cuda" ] || {
  echo "gpu_bundle.sh: $build has no CUDA tests; configure with nvcc and cuDNN present" >&2
  exit 1
}
bins=()
for b in "$build"/tests/backend/cuda/*_test "$build"/tests/examples/vdsr_test \
  "$build"/bench/lms-bench "$build"/bench/time_model_bench "$build"/bench/cuda_reduce_bench \
  "$build"/examples/vdsr/vdsr; do
  [ -x "$b" ] && bins+=("$b")
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
# Every library the programs load, but the C runtime, the C++ runtime and
# CUDA's (the GPU machine has its own, matching its driver).
for b in "${bins[@]}"; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|cuda|cudnn|cublas|liblms' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# The absolute source folder the test programs were built with (test data).
pwd >"$stage/source_dir"
tar -cJf "$out" "${bins[@]}" "$build"/src/liblms.so* -C "$stage" lib source_dir
echo "wrote $out ($(du -h "$out" | cut -f1)) with ${#bins[@]} programs and $(ls "$stage/lib" | wc -l) libraries"
