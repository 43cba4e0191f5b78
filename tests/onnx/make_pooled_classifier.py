#!/usr/bin/env python3
"""Writes a small convolutional classifier exported to ONNX and its PyTorch
reference for tests/onnx/pooled_classifier_loss_test.cc, which runs it at
test time (nothing is committed).

conv3x3 -> relu -> conv1x1 to 5 classes -> mean over H, W (keepdim, so the
output is [N,5,1,1], ONNX ReduceMean keepdims=1), exported by
scripts/export_onnx.py. The reference holds the input, the labels (as
floats, -100 = ignored), F.cross_entropy of the flattened output and the
gradient of every parameter after one forward/backward.

    make_pooled_classifier.py OUT_DIR
    (writes pooled_classifier.onnx and pooled_classifier_ref.txt)

Exit status 77 when torch or onnx cannot be imported. Seed: SEED, printed.
"""
import os
import sys

try:
    import onnx  # noqa: F401
    import torch
    from torch import nn
except ImportError:
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402

SEED = 4321
SHAPE = (6, 2, 8, 8)
CLASSES = 5


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(SHAPE[1], 8, 3, padding=1)
        self.head = nn.Conv2d(8, CLASSES, 1)

    def forward(self, x):
        return torch.mean(self.head(torch.relu(self.conv(x))), dim=(2, 3), keepdim=True)


def line(name, t):
    values = " ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())
    return "%s %d %s\n" % (name, t.numel(), values)


def main(out_dir):
    print("make_pooled_classifier: seed", SEED)
    torch.manual_seed(SEED)
    model = Classifier().train()
    x = torch.randn(SHAPE)
    labels = torch.randint(0, CLASSES, (SHAPE[0],))
    labels[1] = -100
    export_onnx.export(model, x, os.path.join(out_dir, "pooled_classifier.onnx"))
    loss = nn.functional.cross_entropy(model(x).flatten(1), labels)
    loss.backward()
    with open(os.path.join(out_dir, "pooled_classifier_ref.txt"), "w") as f:
        f.write("# tests/onnx/make_pooled_classifier.py, seed %d\n" % SEED)
        f.write(line("input", x))
        f.write(line("labels", labels.to(torch.float32)))
        f.write(line("loss", loss))
        for name, p in model.named_parameters():
            f.write(line(name + "/grad", p.grad))


if __name__ == "__main__":
    main(sys.argv[1])
