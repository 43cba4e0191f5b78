#!/bin/sh
# Speed target: one VDSR training step (batch 16, 1x64x64, depth 20,
# 64 channels, Adam) on lms's emulated CPU device vs. PyTorch on the CPU with
# the same thread count; target lms/pytorch <= 0.8. Runs both alternately
# `rounds` times and prints the per-step times and the ratio of the best means.
#
#   bench/compare_pytorch.sh [--build DIR] [--threads N] [--steps N] [--rounds N] [--priority]
#
# --build     build dir holding bench/vdsr_step_bench (default: build)
# --threads   threads of both (default: nproc)
# --priority  run both in a fresh autogroup at nice -19 (root only): on a
#             machine shared with builds, CFS autogrouping otherwise gives the
#             benchmark only its group's share of the cores (bench/SPEED.md)
# Installs Debian's python3-torch (for /usr/bin/python3) when it is missing.
set -eu

build=build
threads=$(nproc)
steps=5
rounds=2
priority=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --priority) priority=1; shift ;;
    *) echo "compare_pytorch.sh: unknown argument '$1' (allowed: --build DIR, --threads N," \
         "--steps N, --rounds N, --priority)" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
bench="$build/bench/vdsr_step_bench"
if [ ! -x "$bench" ]; then
  echo "compare_pytorch.sh: $bench not found; build it: cmake --build $build --target vdsr_step_bench" >&2
  exit 1
fi
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "installing python3-torch (Debian) ..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-torch >/dev/null
fi

run() {
  if [ "$priority" = 1 ]; then
    setsid sh -c 'echo -19 > /proc/$$/autogroup && exec nice -n -19 "$@"' sh "$@"
  else
    "$@"
  fi
}

# The mean of one run's timed steps, from its "... seconds/step: mean X min Y" line.
mean_of() { sed -n 's/.*seconds\/step: mean \([0-9.]*\).*/\1/p'; }

best_lms=""
best_torch=""
i=1
while [ "$i" -le "$rounds" ]; do
  echo "round $i: $(uptime | sed 's/.*load/load/')"
  lms=$(run "$bench" --threads "$threads" --warmup 2 --steps "$steps" | mean_of)
  torch=$(run /usr/bin/python3 "$here/pytorch_vdsr.py" --threads "$threads" --warmup 2 \
    --steps "$steps" | mean_of)
  echo "  lms     $lms s/step"
  echo "  pytorch $torch s/step"
  best_lms=$(printf '%s\n%s\n' "$lms" "$best_lms" | grep . | sort -g | head -1)
  best_torch=$(printf '%s\n%s\n' "$torch" "$best_torch" | grep . | sort -g | head -1)
  i=$((i + 1))
done
echo "threads $threads, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}, priority $priority," \
  "$(uptime | sed 's/.*load/load/')"
awk -v l="$best_lms" -v t="$best_torch" 'BEGIN {
  printf "best mean s/step: lms %.3f  pytorch %.3f  lms/pytorch %.2f (target <= 0.80)\n", l, t, l / t }'
