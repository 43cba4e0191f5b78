#!/usr/bin/env bash
# On a GPU machine without lms's build dependencies: unpacks the archive of
# scripts/gpu_bundle.sh into this checkout (the same commit it was built
# from), points the loader at its libraries and at the machine's CUDA
# runtime and cuDNN, and runs scripts/gpu_check.sh --skip-build on it.
# Arguments after the archive go to gpu_check.sh (--out DIR, --quick).
#
# usage: scripts/gpu_run_bundle.sh gpu-bundle.tar.xz [gpu_check.sh flags]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,8p' "$0"; exit 2; }
bundle="$1"
shift
tar -xJf "$bundle"
rm -rf .gpu-lib && mv lib .gpu-lib
build=$(tar -tJf "$bundle" | awk -F/ '/\/src\/liblms\.so/ && !seen++ {print $1}')
# The test programs find their data under the folder they were built in.
src=$(cat source_dir)
rm -f source_dir
if [ ! -e "$src" ] && [ "$src" != "$PWD" ]; then
  mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$PWD" "$src" ||
    echo "note: cannot link $src to this checkout; tests that read test data may fail"
fi
cuda_dirs=$(find /usr /opt \( -name 'libcudnn.so.9' -o -name 'libcudart.so.13' -o -name 'libnccl.so.2' \) 2>/dev/null |
  xargs -r -n1 dirname | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="$PWD/$build/src:$PWD/.gpu-lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/usr/local/cuda/bin"
echo "CUDA runtime and cuDNN from: ${cuda_dirs:-(not found: the loader default paths)}"
exec scripts/gpu_check.sh --skip-build --build-dir "$build" "$@"
