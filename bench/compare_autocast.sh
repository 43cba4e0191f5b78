#!/bin/sh
# Speed in mixed precision: the training step of ResNet-50 (batch 8,
# 128x128, SGD) and of the GPT of the context study (4 layers, width 256,
# batch 4, context 512, Adam) on lms's emulated CPU device without LMS
# (lms-bench onnx, --precision fp32 and bf16) against PyTorch in float32
# and under torch.autocast("cpu", bfloat16) (bench/pytorch_autocast_step.py),
# with the same thread count. Prints each step time (lms: lms-bench's
# time/step; PyTorch: the best of --steps) and the ratios bf16/fp32 and
# lms/PyTorch. Give the CPU flags with the figures: bf16 is native only
# where oneDNN has bf16 primitives (AVX-512 and up).
#
#   bench/compare_autocast.sh [--build DIR] [--threads N] [--steps N] [--model resnet50|gpt|all]
#
# Needs libopenblas0-pthread for a fair PyTorch (Debian's torch otherwise
# runs its linear layers on the reference BLAS); installs it when missing.
set -eu

build=build-release
threads=$(nproc)
steps=3
models="resnet50 gpt"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --model) models=$2; [ "$models" = all ] && models="resnet50 gpt"; shift 2 ;;
    *) echo "compare_autocast.sh: unknown argument '$1' (allowed: --build DIR, --threads N," \
         "--steps N, --model resnet50|gpt|all)" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bench="$build/bench/lms-bench"
[ -x "$bench" ] || { echo "compare_autocast.sh: $bench not found; build the target lms-bench" >&2; exit 1; }
if ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -qq libopenblas0-pthread >/dev/null
fi
export GOMP_SPINCOUNT=30000
mkdir -p "$root/out"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads;" \
  "flags: $(grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"

lms_step() {  # model file, input, loss, batch, precision -> s/step of the LMS-off row
  "$bench" onnx --model "$1" --input "$2" --loss "$3" --batch "$4" --steps "$steps" \
    --capacity 8GiB --threads "$threads" --no-search --precision "$5" 2>/dev/null |
    awk -F'|' '$2 ~ /off/ && $3 ~ /[0-9]/ {gsub(/ /, "", $3); print $3; exit}'
}

for model in $models; do
  if [ "$model" = resnet50 ]; then
    file="$root/out/resnet50_128.onnx"; input="input:B,3,128,128"; loss="cross-entropy:1000"
    batch=8; size=128
    [ -f "$file" ] || /usr/bin/python3 "$root/scripts/export_torchvision.py" resnet50 1,3,128,128 \
      "$file" >/dev/null 2>&1
  else
    file="$root/out/gpt_ctx.onnx"; input="ids:4,T"; loss="cross-entropy:256"; batch=512; size=512
    [ -f "$file" ] || /usr/bin/python3 "$root/scripts/gpt_model.py" "$file" --layers 4 --width 256 \
      --heads 8 --vocab 256 --context 8192 >/dev/null 2>&1
  fi
  lms32=$(lms_step "$file" "$input" "$loss" "$batch" fp32)
  lms16=$(lms_step "$file" "$input" "$loss" "$batch" bf16)
  torch_out=$(/usr/bin/python3 "$here/pytorch_autocast_step.py" "$model" --batch \
    "$([ "$model" = gpt ] && echo 4 || echo 8)" --size "$size" --threads "$threads" --steps "$steps")
  pt32=$(echo "$torch_out" | awk '$2 == "fp32" {print $3}')
  pt16=$(echo "$torch_out" | awk '$2 == "bf16" {print $3}')
  awk -v m="$model" -v a="$lms32" -v b="$lms16" -v c="$pt32" -v d="$pt16" 'BEGIN {
    printf "%s: lms fp32 %.3f s, bf16 %.3f s (bf16/fp32 %.2f); PyTorch fp32 %.3f s, autocast bf16 %.3f s (%.2f); lms/PyTorch fp32 %.2f, bf16 %.2f\n",
      m, a, b, b / a, c, d, d / c, a / c, b / d }'
done
