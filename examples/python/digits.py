#!/usr/bin/env python3
"""Trains a PyTorch classifier exported to ONNX on scikit-learn's digits with
LMS, from Python: the Python twin of the C++ program examples/digits (same
split, batches, optimizer and seed, so the same losses bit for bit).

    scripts/export_torchvision.py resnet18-digits 1,1,32,32 out/resnet18_digits.onnx --classes 10
    python3 examples/python/digits.py --model out/resnet18_digits.onnx \\
        --data data/digits/digits.csv.gz --capacity 64MiB --batch 64 --epochs 3
"""
import argparse
import gzip
import sys

import numpy as np

import lms


def read_digits(path, side):
    """Images [count, 1, side, side] in [0, 1] (value / 16, pixels repeated) and labels."""
    rows = np.loadtxt(gzip.open(path, "rt"), delimiter=",", dtype=np.int64, ndmin=2)
    if rows.shape[1] != 65 or rows[:, :64].min() < 0 or rows[:, :64].max() > 16:
        raise ValueError(f"{path}: expected 64 pixel values in 0..16 and a label per line")
    scale = side // 8
    pixels = rows[:, :64].reshape(-1, 8, 8).astype(np.float32) / np.float32(16)
    pixels = pixels.repeat(scale, axis=1).repeat(scale, axis=2)
    return pixels[:, None], rows[:, 64].copy()


def splitmix64_order(n, seed):
    """Fisher-Yates on splitmix64: the permutation of examples/digits, on every machine."""
    mask = (1 << 64) - 1
    order = list(range(n))
    state = seed
    for i in range(n, 1, -1):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        j = z % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return np.array(order)


def progress(steps):
    try:
        from tqdm import tqdm
        return tqdm(range(steps), unit="step")
    except ImportError:
        return range(steps)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="ONNX classifier: input [B,1,side,side]")
    p.add_argument("--data", default="data/digits/digits.csv.gz")
    p.add_argument("--side", type=int, default=32)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--capacity", default="64MiB", help="the device's memory")
    p.add_argument("--lms", help="LMS config file (TOML)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--losses", help="write every step's loss here, one per line")
    a = p.parse_args(argv)

    pixels, labels = read_digits(a.data, a.side)
    order = splitmix64_order(len(labels), a.seed)
    test_count = int(np.floor(len(labels) * 0.2 + 0.5))
    train_x, train_y = pixels[order[test_count:]], labels[order[test_count:]]
    test_x, test_y = pixels[order[:test_count]], labels[order[:test_count]]
    print(f"digits: {len(train_y)} training and {len(test_y)} held-out images of "
          f"{a.side}x{a.side} (seed {a.seed})")

    m = lms.import_onnx(a.model, inputs={"input": (a.batch, 1, a.side, a.side)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy(labels="labels"))
    train = lms.training_graph(m.graph, lms.Sgd(lr=a.lr, momentum=a.momentum,
                                                weight_decay=a.weight_decay))
    config = lms.LmsConfig.from_file(a.lms) if a.lms else lms.LmsConfig()
    device = lms.cpu_device(capacity=a.capacity, threads=a.threads)
    report = lms.rewrite(train, config, device)
    print(report.summary())
    session = lms.Session(train, device)

    per_epoch = -(-len(train_y) // a.batch)
    steps = a.max_steps if a.max_steps > 0 else per_epoch * a.epochs
    losses = []
    for step in progress(steps):
        rows = (step * a.batch + np.arange(a.batch)) % len(train_y)
        result = session.run({"input": train_x[rows], "labels": train_y[rows]})
        losses.append(result.loss)
    print(f"step {steps}: loss {losses[-1]:.4f}; peak {lms.format_bytes(report.peak_bytes_after)} "
          f"on a device of {a.capacity}, {len(report.swapped)} swapped, "
          f"{len(report.recomputed)} recomputed")

    evaluation = lms.import_onnx(a.model, inputs={"input": (a.batch, 1, a.side, a.side)},
                                 eval_mode=True)
    tester = lms.Session(evaluation.graph, lms.cpu_device(capacity=a.capacity, threads=a.threads),
                         fetches=evaluation.outputs)
    tester.load_state_dict({n: session.read(n) for n in tester.persistent_tensors})
    right = 0
    for first in range(0, len(test_y), a.batch):
        rows = (first + np.arange(a.batch)) % len(test_y)
        logits = tester.run({"input": test_x[rows]}).fetched[evaluation.outputs[0]]
        n = min(a.batch, len(test_y) - first)
        right += int((logits[:n].argmax(axis=1) == test_y[rows][:n]).sum())
    print(f"digits: test accuracy {100 * right / len(test_y):.2f}% on {len(test_y)} images")
    if a.losses:
        with open(a.losses, "w") as f:
            f.writelines(f"{loss:.9g}\n" for loss in losses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
