#!/usr/bin/env python3
"""A small PyTorch CNN for 16x16 single-channel images and 10 classes,
exported with scripts/export_onnx.py for examples/digits' tests.

    make_tiny_classifier.py OUT.onnx SEED
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import export_onnx  # noqa: E402


def main(out, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
    export_onnx.export(model.train(), torch.randn(1, 1, 16, 16), out)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
