#!/usr/bin/env python3
"""Generates tests/data/onnx/unet_small.onnx and unet_small_ref.txt, the
PyTorch reference of tests/onnx/unet_import_test.cc.

A 2-D U-Net-like net built only from ops lms::import_onnx maps (conv, batch
norm in training mode, relu, leaky relu, max pool, nearest upsample,
transposed conv, concat, sigmoid), exported by scripts/export_onnx.py. The
reference holds the input, the target, the output, the MSE loss and the
gradient of every parameter after one forward/backward in training mode.

    make_unet_fixture.py OUT_DIR     (writes both files into OUT_DIR)

Seeds: torch.manual_seed(SEED) before building the model, then the input
and target are drawn in that order. Printed when run.
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402

SEED = 1234
SHAPE = (2, 1, 16, 16)


def block(cin, cout, act):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), act)


class SmallUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = block(1, 4, nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.enc2 = block(4, 8, nn.LeakyReLU(0.1))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.deconv = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.dec = block(16, 4, nn.ReLU())
        self.head = nn.Conv2d(4, 1, 1)
        self.out = nn.Sigmoid()

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        d = torch.cat([e1, self.deconv(e2), self.up(e2)], dim=1)
        return self.out(self.head(self.dec(d)))


def line(name, t):
    values = " ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())
    return "%s %d %s\n" % (name, t.numel(), values)


def main(out_dir):
    print("make_unet_fixture: seed", SEED)
    torch.manual_seed(SEED)
    model = SmallUNet().train()
    x = torch.randn(SHAPE)
    target = torch.rand(SHAPE)
    onnx_path = os.path.join(out_dir, "unet_small.onnx")
    # The export runs the model once in training mode; do it on a copy so the
    # reference below starts from the same running statistics.
    import copy
    export_onnx.export(copy.deepcopy(model), x, onnx_path)
    y = model(x)
    loss = nn.functional.mse_loss(y, target)
    loss.backward()
    with open(os.path.join(out_dir, "unet_small_ref.txt"), "w") as f:
        f.write("# tests/onnx/make_unet_fixture.py, seed %d\n" % SEED)
        f.write(line("input", x))
        f.write(line("target", target))
        f.write(line("output", y))
        f.write(line("loss", loss))
        for name, p in model.named_parameters():
            f.write(line(name + "/grad", p.grad))


if __name__ == "__main__":
    main(sys.argv[1])
