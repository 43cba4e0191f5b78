#!/usr/bin/env python3
"""Trains a byte-level GPT (an ONNX file from scripts/gpt_model.py) on a text
with LMS, from Python: the Python twin of the C++ program examples/textlm
(the same windows, optimizer and seed, so the same losses bit for bit).

    /usr/bin/python3 scripts/gpt_model.py out/gpt_kjv.onnx --vocab 256 --context 128
    python3 examples/python/textlm.py --model out/gpt_kjv.onnx --data data/text/kjv.txt \\
        --capacity 32MiB --batch 16 --context 128 --steps 200
"""
import argparse
import math
import sys

import numpy as np

import lms

MASK = (1 << 64) - 1


def text_batch(text, batch, context, seed, step):
    """ids and next [batch, context] int64: windows of `text` whose starts are
    drawn by splitmix64 from seed + step * 0xD1B54A32D192ED03 (examples/textlm)."""
    state = (seed + step * 0xD1B54A32D192ED03) & MASK
    ids = np.empty((batch, context), np.int64)
    nxt = np.empty((batch, context), np.int64)
    for b in range(batch):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        start = (z ^ (z >> 31)) % (len(text) - context)
        ids[b] = text[start:start + context]
        nxt[b] = text[start + 1:start + context + 1]
    return ids, nxt


def progress(steps):
    try:
        from tqdm import tqdm
        return tqdm(range(steps), unit="step")
    except ImportError:
        return range(steps)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="ONNX decoder: int64 ids [B,T] -> [B,T,256]")
    p.add_argument("--input", default="ids")
    p.add_argument("--data", default="data/text/kjv.txt")
    p.add_argument("--held-out", type=float, default=0.1, help="the end of the text")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--capacity", default="64MiB", help="the device's memory")
    p.add_argument("--lms", help="LMS config file (TOML)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--losses", help="write every step's loss here, one per line")
    a = p.parse_args(argv)

    with open(a.data, "rb") as f:
        data = f.read()
    text = np.frombuffer(data[:int(len(data) * (1.0 - a.held_out))], np.uint8)
    if len(text) <= a.context + 1:
        raise SystemExit(f"textlm: {len(text)} bytes to train on; a window needs {a.context + 1}")
    m = lms.import_onnx(a.model, inputs={a.input: (a.batch, a.context)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy(labels="next", classes_last=True))
    train = lms.training_graph(m.graph, lms.Adam(lr=a.lr))
    config = lms.LmsConfig.from_file(a.lms) if a.lms else lms.LmsConfig()
    device = lms.cpu_device(capacity=a.capacity, threads=a.threads)
    report = lms.rewrite(train, config, device)
    print(report.summary())
    session = lms.Session(train, device)
    losses = []
    for step in progress(a.steps):
        ids, nxt = text_batch(text, a.batch, a.context, a.seed, step)
        losses.append(session.run({a.input: ids, "next": nxt}).loss)
    print(f"step {a.steps}: {losses[-1] / math.log(2):.4f} bits/char; peak "
          f"{lms.format_bytes(report.peak_bytes_after)} on a device of {a.capacity}")
    if a.losses:
        with open(a.losses, "w") as f:
            f.writelines(f"{loss:.9g}\n" for loss in losses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
