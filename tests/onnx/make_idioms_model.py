#!/usr/bin/env python3
"""Writes a small classifier built from everyday PyTorch idioms, exported to
ONNX, and its PyTorch reference for tests/onnx/idioms_import_test.cc, which
runs it at test time (nothing is committed).

The idioms, each one a construct that torchvision models or users write:
  - a convolution feeding a ReLU directly (VGG, SqueezeNet): lms fuses them;
  - nn.MaxPool2d(3, 2, ceil_mode=True) (SqueezeNet, GoogLeNet), whose last
    window runs off the input;
  - nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False);
  - nn.Hardswish and F.hardsigmoid (MobileNet V3's activation and
    squeeze-and-excitation gate);
  - a channel shuffle, reshape-transpose-reshape (ShuffleNet V2);
  - x.mean(dim=(2, 3)) without keepdim, global pooling as users write it
    (MNASNet, ShuffleNet V2), and with keepdim in the SE block;
  - a trainable table indexed by a constant index buffer, table[index]
    (Swin's relative position bias), and unsqueeze of the result;
  - F.avg_pool2d with padding, counted (PyTorch's default: Inception v3,
    MaxViT), which exports as Pad + AveragePool;
  - attention written with torch.einsum over five dims (MaxViT), with a
    mask built as Swin builds its shifted-window mask (slice assignment,
    masked_fill with != 0) and a scale from the shape (** -0.5, %): shape
    arithmetic the importer folds;
  - strided slices x[:, 0::2] (Swin's patch merging);
  - tanh (MaxViT's classifier).

The reference holds the input, the labels (as floats), F.cross_entropy of
the logits and every parameter's gradient after one forward/backward.

    make_idioms_model.py OUT_DIR
    (writes idioms.onnx and idioms_ref.txt)

Exit status 77 when torch or onnx cannot be imported. Seed: SEED, printed.
"""
import os
import sys

try:
    import onnx  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402

SEED = 2468
SHAPE = (4, 3, 10, 10)
CLASSES = 5
WIDTH = 8


class Idioms(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(SHAPE[1], WIDTH, 3, padding=1)
        # 10 -> 5 (floor mode would give 4): the last window sees one padding column.
        self.pool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = nn.Conv2d(WIDTH, WIDTH, 3, padding=1)
        self.act = nn.Hardswish()
        self.se_reduce = nn.Conv2d(WIDTH, WIDTH // 2, 1)
        self.se_expand = nn.Conv2d(WIDTH // 2, WIDTH, 1)
        # 5 -> 3: the last window holds one column of x, its divisor 1 * 2.
        self.pool2 = nn.AvgPool2d(2, stride=2, ceil_mode=True, count_include_pad=False)
        self.table = nn.Parameter(torch.randn(9, WIDTH) * 0.1)
        self.register_buffer("index", torch.tensor([[4, 0, 4], [7, 2, 2]]))
        self.fc = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        y = self.pool1(torch.relu(self.conv1(x)))
        y = F.avg_pool2d(y, 3, stride=1, padding=1)
        y = self.act(self.conv2(y))
        n, c, h, w = y.shape
        y = y.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        q = y.reshape(n, 2, 2, 2, h * w)
        mask = torch.zeros(2, 2)
        mask[0, 1:] = 1.0
        mask = mask.masked_fill(mask != 0, -100.0)
        scale = (h * w % 7 + 1) ** -0.5  # 25 % 7 + 1 = 5
        scores = torch.einsum("b g h i d, b g h j d -> b g h i j", q, q) * scale + mask
        attended = torch.einsum("bghij,bghjd->bghid", scores.softmax(dim=-1), q)
        y = y + 0.5 * attended.reshape(n, c, h, w)
        s = y.mean(dim=(2, 3), keepdim=True)
        s = F.hardsigmoid(self.se_expand(torch.relu(self.se_reduce(s))))
        y = self.pool2(y * s)
        bias = self.table[self.index].mean(dim=(0, 1)).unsqueeze(0)
        feat = y.mean(dim=(2, 3))
        feat = torch.cat([feat[:, 1::2], feat[:, 0::2]], dim=1)
        return self.fc(torch.tanh(feat + bias))


def line(name, t):
    values = " ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())
    return "%s %d %s\n" % (name, t.numel(), values)


def main(out_dir):
    print("make_idioms_model: seed", SEED)
    torch.manual_seed(SEED)
    model = Idioms().train()
    x = torch.randn(SHAPE)
    labels = torch.randint(0, CLASSES, (SHAPE[0],))
    export_onnx.export(model, x, os.path.join(out_dir, "idioms.onnx"))
    loss = F.cross_entropy(model(x), labels)
    loss.backward()
    with open(os.path.join(out_dir, "idioms_ref.txt"), "w") as f:
        f.write("# tests/onnx/make_idioms_model.py, seed %d\n" % SEED)
        f.write(line("input", x))
        f.write(line("labels", labels.to(torch.float32)))
        f.write(line("loss", loss))
        for name, p in model.named_parameters():
            f.write(line(name + "/grad", p.grad))


if __name__ == "__main__":
    main(sys.argv[1])
