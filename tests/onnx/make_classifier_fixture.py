#!/usr/bin/env python3
"""Generates tests/data/onnx/classifier_small.onnx and classifier_small_ref.txt,
the PyTorch reference of tests/onnx/classifier_import_test.cc.

A MobileNet-like image classifier built from the ops lms::import_onnx maps
onto lms's classifier ops: conv, depthwise conv (group = C), grouped 1x1
conv, batch norm in training mode, ReLU6 (Clip with constant min / max),
AvgPool2d, AdaptiveAvgPool2d(1) (GlobalAveragePool), Flatten, nn.Linear
(Gemm, transB = 1), clamp (Clip), reshape(-1, F) (Reshape with a constant
shape) and x @ w.t() (a Transpose of the initializer w into MatMul input B),
exported by scripts/export_onnx.py (training mode, opset 14). The
reference holds the input, the target, the output, the MSE loss and the
gradient of every parameter after one forward/backward in training mode;
then, from the values in the exported file (read back with onnx), the
parameters and running statistics after STEPS steps of SGD (LR, MOMENTUM)
on the same batch ("trained/<name>"), and the output of that trained model
in eval mode ("eval_output").

    make_classifier_fixture.py OUT_DIR     (writes both files into OUT_DIR)

Seeds: torch.manual_seed(SEED) before building the model, then the input
and target are drawn in that order. Printed when run.
"""
import copy
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402

SEED = 4242
STEPS = 3
LR = 0.05
MOMENTUM = 0.9
SHAPE = (4, 3, 8, 8)
CLASSES = 10


def block(conv):
    return [conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU6()]


class SmallClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            *block(nn.Conv2d(3, 8, 3, padding=1)),
            *block(nn.Conv2d(8, 8, 3, padding=1, groups=8)),  # depthwise
            *block(nn.Conv2d(8, 16, 1, groups=2)),  # grouped pointwise
            nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(16, 32)
        self.proj = nn.Parameter(torch.randn(CLASSES, 32) * 0.2)
        # Away from BN's initial scale 1 and shift 0, under which
        # relu6(gamma * x) is gamma * relu6(x) and the next BN cancels gamma:
        # its gradient would be round-off in both frameworks.
        for m in self.features:
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.5, 0.5)

    def forward(self, x):
        h = torch.clamp(self.fc(self.features(x)), -1.0, 1.0)
        return h.reshape(-1, 32) @ self.proj.t()


def line(name, t):
    values = " ".join("%.9g" % v for v in t.detach().reshape(-1).tolist())
    return "%s %d %s\n" % (name, t.numel(), values)


def from_file(model, path):
    """A copy of `model` holding the initializers of the ONNX file at `path`
    (parameters and running statistics, under their PyTorch names)."""
    import onnx
    from onnx import numpy_helper
    values = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
              for t in onnx.load(path).graph.initializer}
    copy_ = copy.deepcopy(model)
    state = copy_.state_dict()
    with torch.no_grad():
        for name, t in state.items():
            if name in values:
                t.copy_(values[name].reshape(t.shape))
    return copy_


def trained_lines(model, x, target):
    """STEPS steps of SGD with momentum in training mode, then the model in
    eval mode: the reference of ClassifierImport.RunningStatisticsMatchPyTorch."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model.train()
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), target).backward()
        opt.step()
    out = [line("trained/" + name, t) for name, t in model.state_dict().items()
           if not name.endswith("num_batches_tracked")]
    model.eval()
    with torch.no_grad():
        out.append(line("eval_output", model(x)))
    return out


def main(out_dir):
    print("make_classifier_fixture: seed", SEED)
    torch.manual_seed(SEED)
    model = SmallClassifier().train()
    x = torch.randn(SHAPE)
    target = torch.randn(SHAPE[0], CLASSES)
    # The export runs the model once in training mode; do it on a copy so the
    # reference below starts from the same running statistics.
    path = os.path.join(out_dir, "classifier_small.onnx")
    export_onnx.export(copy.deepcopy(model), x, path)
    trained = trained_lines(from_file(model, path), x, target)
    y = model(x)
    loss = nn.functional.mse_loss(y, target)
    loss.backward()
    with open(os.path.join(out_dir, "classifier_small_ref.txt"), "w") as f:
        f.write("# tests/onnx/make_classifier_fixture.py, seed %d\n" % SEED)
        f.write(line("input", x))
        f.write(line("target", target))
        f.write(line("output", y))
        f.write(line("loss", loss))
        for name, p in model.named_parameters():
            f.write(line(name + "/grad", p.grad))
        f.writelines(trained)


if __name__ == "__main__":
    main(sys.argv[1])
