#!/usr/bin/env bash
# The main job: installs what is missing, builds, fetches the real photos, and
# prints the LMS comparison on VDSR (lms-bench: batch sweep with LMS off and
# on under one device capacity, and the largest batch each way), then trains
# VDSR briefly with LMS and evaluates PSNR against bicubic on held-out photos.
set -euo pipefail
cd "$(dirname "$0")/.."
# GNU OpenMP (under oneDNN) spins at barriers by default; with any other busy
# thread on the machine that slows kernels up to 10x. A short spin keeps the
# speed when idle and degrades gracefully when not (bench/SPEED.md).
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-30000}
scripts/install_deps.sh
scripts/fetch_data.sh data
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release -j "$(nproc)" --target lms-bench vdsr
mkdir -p out
echo "== lms-bench: VDSR batch sweep, 256 MiB emulated device"
build-release/bench/lms-bench vdsr --data data --batch 4,8,16,32,64 --capacity 256MiB \
  --steps 2 --trace out/traces --json out/lms-bench.json
echo "== VDSR: short training with LMS, then PSNR on the held-out photos"
build-release/examples/vdsr/vdsr train --data data --capacity 256MiB --batch 32 --crop 48 --lr 1e-3 \
  --steps ${VDSR_STEPS:-30} --lms configs/lms.toml --checkpoint out/vdsr.ckpt --checkpoint-every 10
build-release/examples/vdsr/vdsr eval --data data --checkpoint out/vdsr.ckpt --out out/vdsr_eval.png
