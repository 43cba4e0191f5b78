#!/usr/bin/env python3
"""PyTorch's side of bench/compare_autocast.sh: the training step of
torchvision's ResNet-50 (SGD with momentum, cross-entropy) or of the GPT of
scripts/gpt_model.py (Adam, cross-entropy over every position), in float32
and under torch.autocast("cpu", dtype=torch.bfloat16), with `--threads`
threads. Prints one line per precision (--precision fp32, bf16 or both): "pytorch <fp32|bf16> <best s>
<median s>" over `--steps` timed steps after one warm-up step.

    pytorch_autocast_step.py resnet50 --batch 8 --size 128 --threads 2 --steps 3
    pytorch_autocast_step.py gpt --batch 4 --size 512 --threads 2 --steps 3

--size is the image side (resnet50, vit_b_16: 224 only) or the context (gpt: 4 layers, width
256, 8 heads, 256 tokens, the model of bench/README.md's context study).
"""
import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))


def build(name, size):
    if name in ("resnet50", "vit_b_16"):
        import torchvision
        model = getattr(torchvision.models, name)(num_classes=1000)
        return model, lambda b: (torch.randn(b, 3, size, size), torch.randint(0, 1000, (b,)))
    import gpt_model
    model = gpt_model.GPT(layers=4, width=256, heads=8, vocab=256, context=size)
    return model, lambda b: (torch.randint(0, 256, (b, size)), torch.randint(0, 256, (b, size)))


def step_times(model, batch, make, bf16, steps, adam):
    opt = (torch.optim.Adam(model.parameters(), lr=1e-4) if adam else
           torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    x, y = make(batch)
    times = []
    for k in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        if k > 0:  # the first step warms up
            times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=["resnet50", "vit_b_16", "gpt"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, make = build(a.model, a.size)
    model.train()
    for precision in ("fp32", "bf16") if a.precision == "both" else (a.precision,):
        best, median = step_times(model, a.batch, make, precision == "bf16", a.steps,
                                  a.model == "gpt")
        print("pytorch %s %.4f %.4f" % (precision, best, median), flush=True)


if __name__ == "__main__":
    main()
