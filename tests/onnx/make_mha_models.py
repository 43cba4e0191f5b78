#!/usr/bin/env python3
"""Writes the models of tests/onnx/mha_import_test.cc and their PyTorch
references, exported by torch.onnx.export in training mode without
constant folding (scripts/export_onnx.py); run at test time, nothing is
committed.

    make_mha_models.py OUT_DIR

For each FORM, OUT_DIR/FORM.onnx and OUT_DIR/FORM_ref.txt:
- "mha_batch_first", "mha_seq_first": x -> nn.MultiheadAttention(16, 2,
  batch_first either way)(x, x, x) -> Linear(16, 16), x [3, 5, 16] (N, T
  or T, N first); "mha_weights": batch first, its first head's attention
  weights read too (out(y) + w[:, 0] @ x), which the fusion does not match;
- "vit14", "vit17": torchvision's VisionTransformer, as vit_b_16 but small
  (32x32 images, 8x8 patches, so T = 17 tokens with the class token; 2
  blocks of 2 heads, width 16, MLP 32, 10 classes; the head drawn from
  N(0, 0.5^2), not torchvision's zeros), at opsets 14 and 17.
Both write nn.MultiheadAttention's attention, which torch 1.13 exports with
q scaled before a rank-3 [N*H,T,D] x [N*H,D,S] MatMul.

A reference (tests/onnx/reference.h format) holds the input, the target,
the output, the mse loss and the gradient of every parameter under its ONNX
initializer name. Exit status 77 when torch, torchvision or onnx cannot be
imported. Seed: SEED, printed.
"""
import os
import sys

try:
    import onnx  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torchvision.models.vision_transformer import VisionTransformer
except ImportError:
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402

SEED = 2029


class Mha(nn.Module):
    def __init__(self, batch_first, weights=False):
        super().__init__()
        self.weights = weights
        self.attn = nn.MultiheadAttention(16, 2, batch_first=batch_first)
        self.out = nn.Linear(16, 16)

    def forward(self, x):
        y, w = self.attn(x, x, x, need_weights=self.weights, average_attn_weights=False)
        # The first head's probabilities read too: the Softmax has a second
        # reader, so the chain is not fused.
        return self.out(y) + w[:, 0] @ x if self.weights else self.out(y)


def write_reference(path, tensors):
    with open(path, "w") as f:
        f.write("# make_mha_models.py, seed %d\n" % SEED)
        for name, t in tensors.items():
            values = t.detach().reshape(-1).tolist()
            f.write("%s %d %s\n" % (name, len(values), " ".join("%.9g" % v for v in values)))


def write(out_dir, form, model, x, target, opset):
    model.train()
    export_onnx.export(model, x, os.path.join(out_dir, form + ".onnx"), opset_version=opset)
    y = model(x)
    loss = F.mse_loss(y, target)
    loss.backward()
    ref = {"input": x, "target": target, "output": y, "loss": loss}
    for name, p in model.named_parameters():
        ref[name + "/grad"] = p.grad
    write_reference(os.path.join(out_dir, form + "_ref.txt"), ref)


def main(out_dir):
    print("make_mha_models: seed", SEED)
    for form, batch_first, weights in (("mha_batch_first", True, False),
                                       ("mha_seq_first", False, False),
                                       ("mha_weights", True, True)):
        torch.manual_seed(SEED)
        x = torch.randn(3, 5, 16)
        write(out_dir, form, Mha(batch_first, weights), x, torch.randn(3, 5, 16), 14)
    for opset in (14, 17):
        torch.manual_seed(SEED)
        vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                hidden_dim=16, mlp_dim=32, num_classes=10)
        # torchvision starts the head at zero, which would make every
        # gradient below it 0: random instead, so that the attention's count.
        nn.init.normal_(vit.heads.head.weight, std=0.5)
        write(out_dir, "vit%d" % opset, vit, torch.randn(2, 3, 32, 32), torch.randn(2, 10), opset)


if __name__ == "__main__":
    main(sys.argv[1])
