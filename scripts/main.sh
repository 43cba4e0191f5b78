#!/usr/bin/env bash
# The main job: installs what is missing, builds, fetches the real photos and
# MRI, and runs both studies:
#  1. VDSR on photos: the LMS comparison (lms-bench: batch sweep with LMS off
#     and on under one device capacity, and the largest batch each way), then
#     a short VDSR training with LMS and PSNR against bicubic on held-out
#     photos;
#  2. the 3-D U-Net on MRI: the resolution sweep with LMS off and on, the
#     largest cube each way, and the case study (the same network trained at
#     both sizes, Dice per class on the high-resolution grid);
#  3. a model brought from PyTorch: torchvision's resnet18 (for 32x32
#     single-channel images) exported to ONNX, imported, and trained with LMS
#     on scikit-learn's handwritten digits under a device it needs LMS for;
#     the loss curve and the held-out accuracy;
#  4. a byte-level language model: a GPT-2-style decoder written in PyTorch
#     (scripts/gpt_model.py), exported, imported and trained with LMS on the
#     King James Bible under a device it needs LMS for; the held-out loss in
#     bits per character, and the same steps without LMS compared bit for
#     bit.
# Tables go to the terminal; plots, traces, PNGs and JSON to out/.
set -euo pipefail
cd "$(dirname "$0")/.."
# GNU OpenMP (under oneDNN) spins at barriers by default; with any other busy
# thread on the machine that slows kernels up to 10x. A short spin keeps the
# speed when idle and degrades gracefully when not (bench/SPEED.md).
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-30000}
scripts/install_deps.sh
scripts/fetch_data.sh data
# Ninja, as scripts/test.sh (a folder configured for Make is started afresh).
if grep -qs '^CMAKE_GENERATOR:INTERNAL=Unix Makefiles' build-release/CMakeCache.txt; then
  rm -rf build-release
fi
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release -j "$(nproc)" --target lms-bench vdsr unet3d digits textlm
mkdir -p out
# The sweeps opt in to least-workspace convolution kernels to reach the
# working-set limit (kernel_choice; they print it with their figures): their
# LMS runs then round as those kernels do, not as the default ones.
lean=(--lms-set kernel_choice=least_workspace_to_fit)
echo "== lms-bench: VDSR batch sweep, 256 MiB emulated device"
build-release/bench/lms-bench vdsr --data data --batch 4,8,16,32,64 --capacity 256MiB \
  --steps 2 --trace out/traces --json out/lms-bench.json "${lean[@]}"
echo "== VDSR: short training with LMS, then PSNR on the held-out photos"
build-release/examples/vdsr/vdsr train --data data --capacity 256MiB --batch 32 --crop 48 --lr 1e-3 \
  --steps ${VDSR_STEPS:-30} --lms configs/lms.toml --checkpoint out/vdsr.ckpt --checkpoint-every 10
build-release/examples/vdsr/vdsr eval --data data --checkpoint out/vdsr.ckpt --out out/vdsr_eval.png
echo "== lms-bench: 3-D U-Net (Isensee et al., 4 levels) on MRI: resolution sweep under a 96 MiB"
echo "   emulated device, then the case study at the largest cube each way"
build-release/bench/lms-bench unet3d --data data/mri --filters 8 --levels 4 --capacity 96MiB \
  --size 32,48,64,72 --steps 1 --study-steps ${UNET3D_STEPS:-100} --out out/unet3d_case_study \
  --trace out/unet3d_traces --json out/lms-bench-unet3d.json "${lean[@]}"
echo "== digits: torchvision's resnet18, exported from PyTorch, trained with LMS on scikit-learn's"
echo "   handwritten digits under a 256 MiB emulated device (it needs 413 MiB without LMS)"
/usr/bin/python3 scripts/export_torchvision.py resnet18-digits 1,1,32,32 out/resnet18_digits.onnx \
  --classes 10 2>/dev/null
build-release/examples/digits/digits --model out/resnet18_digits.onnx \
  --data data/digits/digits.csv.gz --capacity 256MiB --batch 64 --epochs ${DIGITS_EPOCHS:-3}
echo "== digits again in bf16 (lms::autocast, as torch.autocast): the accuracy beside the float32 run's"
build-release/examples/digits/digits --model out/resnet18_digits.onnx \
  --data data/digits/digits.csv.gz --capacity 256MiB --batch 64 --epochs ${DIGITS_EPOCHS:-3} \
  --precision bf16
echo "== textlm: a byte-level GPT (2 layers, width 128, 4 heads, 1024-byte context), exported from"
echo "   PyTorch, trained with LMS on the King James Bible under a 48 MiB emulated device (it needs 93 MiB without LMS)"
/usr/bin/python3 scripts/gpt_model.py out/gpt_kjv.onnx --layers 2 --width 128 --heads 4 \
  --vocab 256 --context 1024 2>/dev/null
build-release/examples/textlm/textlm --model out/gpt_kjv.onnx --data data/text/kjv.txt \
  --capacity 48MiB --batch 4 --context 1024 --steps ${TEXTLM_STEPS:-200} --eval-every 100
echo "== textlm again in bf16: the bits per character beside the float32 run's"
build-release/examples/textlm/textlm --model out/gpt_kjv.onnx --data data/text/kjv.txt \
  --capacity 48MiB --batch 4 --context 1024 --steps ${TEXTLM_STEPS:-200} --eval-every 100 \
  --precision bf16
echo "== outputs"
ls out out/unet3d_case_study
