#!/usr/bin/env python3
"""Writes a small model of batched MatMuls, exported by torch.onnx.export at
opset 14 in training mode without constant folding, and its PyTorch
reference, for tests/onnx/matmul_import_test.cc, which runs it at test time
(nothing is committed).

    y = lin((a @ b) @ w)     a [2,3,5,4] and b [2,3,4,6] fed, w [6,7] a parameter,
                             lin = nn.Linear(7, 3) on the rank-4 product

The export holds three MatMul nodes: one of two rank-4 operands (batched),
one of a rank-4 A by the rank-2 initializer w (shared by every matrix), and
nn.Linear's, a rank-4 A by Transpose(lin.weight), then Add(lin.bias). The
reference (tests/onnx/reference.h format) holds a, b, the target, the
output, the mse loss and the gradient of every parameter under its ONNX
initializer name.

    make_matmul_model.py OUT_DIR   (writes matmul.onnx, matmul_ref.txt)

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

SEED = 2027


class BatchedProducts(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 7) / 6 ** 0.5)
        self.lin = nn.Linear(7, 3)

    def forward(self, a, b):
        return self.lin(torch.matmul(torch.matmul(a, b), self.w))


def write_reference(path, tensors):
    with open(path, "w") as f:
        f.write("# make_matmul_model.py, seed %d\n" % SEED)
        for name, t in tensors.items():
            values = t.detach().reshape(-1).tolist()
            f.write("%s %d %s\n" % (name, len(values), " ".join("%.9g" % v for v in values)))


def main(out_dir):
    print("make_matmul_model: seed", SEED)
    torch.manual_seed(SEED)
    model = BatchedProducts().train()
    a = torch.randn(2, 3, 5, 4)
    b = torch.randn(2, 3, 4, 6)
    target = torch.randn(2, 3, 5, 3)
    torch.onnx.export(model, (a, b), os.path.join(out_dir, "matmul.onnx"), opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["a", "b"], output_names=["output"])
    y = model(a, b)
    loss = F.mse_loss(y, target)
    loss.backward()
    ref = {"a": a, "b": b, "target": target, "output": y, "loss": loss}
    for name, p in model.named_parameters():
        ref[name + "/grad"] = p.grad
    write_reference(os.path.join(out_dir, "matmul_ref.txt"), ref)


if __name__ == "__main__":
    main(sys.argv[1])
