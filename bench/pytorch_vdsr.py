#!/usr/bin/python3
"""PyTorch peer of bench/vdsr_step_bench.cc: one VDSR training step on the CPU.

VDSR (Kim et al., CVPR 2016) as lms builds it (examples/models/models.cc):
`depth` 3x3 conv layers (1->64, 64->64 x depth-2, 64->1) with bias and ReLU
between them, global residual, MSE loss, Adam. Batch 16 of 1x64x64 crops by
default. Prints seconds per step (mean and min over the timed steps).

Needs Debian's python3-torch, which installs for /usr/bin/python3:
    /usr/bin/python3 bench/pytorch_vdsr.py --threads 2 --warmup 2 --steps 5
"""

import argparse
import os
import sys
import time

import torch
from torch import nn


def build_vdsr(depth: int, channels: int) -> nn.Module:
    layers = []
    for i in range(depth):
        cin = 1 if i == 0 else channels
        cout = 1 if i == depth - 1 else channels
        layers.append(nn.Conv2d(cin, cout, 3, padding=1, bias=True))
        if i != depth - 1:
            layers.append(nn.ReLU())
    body = nn.Sequential(*layers)
    for m in body:
        if isinstance(m, nn.Conv2d):  # He-normal, zero bias, as lms::conv2d
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)

    class Vdsr(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, x):
            return x + self.body(x)

    return Vdsr()


def step_flops(batch: int, size: int, depth: int, channels: int) -> float:
    """Conv FLOPs of a step, counted as bench/vdsr_step_bench.cc counts them."""
    per_ck = 2.0 * batch * size * size * 9
    first, mid = per_ck * channels, per_ck * channels * channels
    fwd = 2 * first + (depth - 2) * mid
    return 3 * fwd - first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.depth < 2:
        ap.error("--threads and --steps must be >= 1, --warmup >= 0, --depth >= 2")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = build_vdsr(a.depth, a.channels)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    lr = torch.rand(a.batch, 1, a.size, a.size)
    hr = torch.rand(a.batch, 1, a.size, a.size)
    print(f"PyTorch {torch.__version__} VDSR step: batch {a.batch}, {a.size}x{a.size}, "
          f"depth {a.depth}, {a.channels} channels, Adam; threads {torch.get_num_threads()}; "
          f"seed {a.seed}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")

    times = []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(lr), hr)
        loss.backward()
        opt.step()
        loss_value = loss.item()
        elapsed = time.perf_counter() - start
        if i >= a.warmup:
            times.append(elapsed)
        tag = " (warm-up)" if i < a.warmup else ""
        print(f"step {i}{tag}: {elapsed:.3f} s, loss {loss_value:.6f}")
    mean = sum(times) / len(times)
    gflop = step_flops(a.batch, a.size, a.depth, a.channels) * 1e-9
    print(f"pytorch seconds/step: mean {mean:.3f} min {min(times):.3f}  "
          f"({gflop:.1f} GFLOP conv, {gflop / mean:.1f} GFLOP/s at mean)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
