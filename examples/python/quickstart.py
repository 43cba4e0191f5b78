#!/usr/bin/env python3
"""Quickstart: export torchvision's resnet18, find its largest batch on a
device with and without LMS, and train a few steps at the LMS one."""
import argparse

import numpy as np
import torch
import torchvision

import lms
import lms.torch

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--capacity", default="256MiB")
p.add_argument("--side", type=int, default=64)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--out", default="resnet18.onnx")
a = p.parse_args()

# 1. Export: training mode, no constant folding, trainable parameters recorded.
model = torchvision.models.resnet18(num_classes=10)
lms.torch.export(model, torch.zeros(2, 3, a.side, a.side), a.out)
device = lms.cpu_device(capacity=a.capacity)


def plan(batch, enabled):
    """The planned training graph at `batch`, or None when it does not fit."""
    m = lms.import_onnx(a.out, inputs={"input": (batch, 3, a.side, a.side)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy())
    train = lms.training_graph(m.graph, lms.Sgd(lr=0.05, momentum=0.9))
    try:  # roofline times: a fast search; the default measures every kernel
        report = lms.rewrite(train, lms.LmsConfig(enabled=enabled, time_model="roofline"), device)
    except MemoryError:
        return None
    return train if report.fits else None


# 2. The largest batch with and without LMS: doubling, then bisection.
def largest(enabled):
    lo, hi = 0, 2  # batch norm needs two values per channel
    while plan(hi, enabled) is not None:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if plan(mid, enabled) is not None else (lo, mid)
    return lo


plain, with_lms = largest(False), largest(True)
print(f"largest batch on {a.capacity}: {plain} without LMS, {with_lms} with LMS")
if with_lms == 0:
    raise SystemExit("not even batch 2 fits: the parameters and momentum need more memory")

# 3. A few steps at the LMS batch (random images here; bring your loader).
train = plan(with_lms, True)
session = lms.Session(train, device)
rng = np.random.default_rng(0)
for step in range(a.steps):
    x = rng.standard_normal((with_lms, 3, a.side, a.side), dtype=np.float32)
    y = rng.integers(0, 10, with_lms)
    result = session.run({"input": x, "labels": y})
    print(f"step {step + 1}: loss {result.loss:.4f}, peak {lms.format_bytes(result.peak_device_bytes)}")
lms.torch.load_state_dict(model, session)  # the trained weights back in PyTorch
