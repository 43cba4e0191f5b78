#!/usr/bin/env python3
"""Writes a tiny self-attention block, exported by torch.onnx.export at
opset 14 in training mode without constant folding, and its PyTorch
reference, for tests/onnx/attention_import_test.cc, which runs it at test
time (nothing is committed).

x[N*T, C] -> q, k, v = Linear(C, C)(x) each, reshaped to [N, T, H, D] and
transposed to [N, H, T, D] -> softmax(q @ k^T * scale + mask) @ v ->
[N*T, C] -> Linear(C, C). torch 1.13 has no F.scaled_dot_product_attention,
so the block writes it out: ONNX gets MatMul(q, Transpose(k)) -> Mul(scale)
-> Add(mask) -> Softmax(axis -1) -> MatMul(., v), which the importer fuses
into one attention node.

    make_attention_model.py OUT_DIR FORM   (writes attention.onnx, attention_ref.txt)

FORM: "causal" (mask -inf above the diagonal, a buffer), "plain" (no mask,
and Div by sqrt(D) in place of the Mul), or "bad_mask" (a mask that is not
causal: -inf below the diagonal, not fused). The mask computed from the
positions i = arange(T) (Range -> Unsqueeze -> Greater or Less -> ...):
"positions_less" ((i[:, None] < i[None, :]).float() * -1e9),
"positions_where" (torch.where(i[None, :] > i[:, None], -1e9, 0)), or
"positions_anticausal" ((i[:, None] > i[None, :]).float() * -1e9, masking
below the diagonal: not fused).

The reference (tests/onnx/reference.h format) holds the input, the target,
the output, the mse loss and the gradient of every parameter under its ONNX
initializer name. Exit status 77 when torch or onnx cannot be imported.
Seed: SEED, printed.
"""
import math
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

SEED = 2027
N, T, H, D = 2, 5, 2, 4
C = H * D


class Attention(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form
        self.q = nn.Linear(C, C)
        self.k = nn.Linear(C, C)
        self.v = nn.Linear(C, C)
        self.out = nn.Linear(C, C)
        if form == "causal":
            self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))
        elif form == "bad_mask":  # the lower triangle masked
            self.register_buffer("mask", torch.full((T, T), float("-inf")).tril(-1))

    def positions_mask(self, t):
        i = torch.arange(t)
        if self.form == "positions_less":
            return (i.unsqueeze(1) < i.unsqueeze(0)).float() * -1e9
        if self.form == "positions_where":
            return torch.where(i.unsqueeze(0) > i.unsqueeze(1), torch.tensor(-1e9), torch.tensor(0.0))
        return (i.unsqueeze(1) > i.unsqueeze(0)).float() * -1e9  # positions_anticausal

    def heads(self, x):
        return x.reshape(N, T, H, D).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        if self.form == "plain":
            scores = q @ k.transpose(-2, -1) / math.sqrt(D)
        elif self.form.startswith("positions"):
            # t from x's dynamic first axis, so that the export computes
            # the positions (Shape -> Range) instead of writing a constant.
            t = x.shape[0] // N
            scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(D)) + self.positions_mask(t)
        else:
            scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(D)) + self.mask
        a = torch.softmax(scores, dim=-1) @ v
        return self.out(a.transpose(1, 2).reshape(N * T, C))


def write_reference(path, tensors):
    with open(path, "w") as f:
        f.write("# make_attention_model.py, seed %d\n" % SEED)
        for name, t in tensors.items():
            values = t.detach().reshape(-1).tolist()
            f.write("%s %d %s\n" % (name, len(values), " ".join("%.9g" % v for v in values)))


def main(out_dir, form):
    print("make_attention_model: seed", SEED, "form", form)
    torch.manual_seed(SEED)
    model = Attention(form).train()
    x = torch.randn(N * T, C)
    target = torch.randn(N * T, C)
    dynamic = {"input": {0: "NT"}} if form.startswith("positions") else None
    export_onnx.export(model, x, os.path.join(out_dir, "attention.onnx"), dynamic_axes=dynamic)
    y = model(x)
    loss = F.mse_loss(y, target)
    loss.backward()
    ref = {"input": x, "target": target, "output": y, "loss": loss}
    for name, p in model.named_parameters():
        ref[name + "/grad"] = p.grad
    write_reference(os.path.join(out_dir, "attention_ref.txt"), ref)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
