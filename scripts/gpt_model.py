#!/usr/bin/env python3
"""A GPT-2-style decoder (Radford et al. 2019) written so that torch 1.13 exports
it to ONNX the way lms::import_onnx reads it, and the script that exports it.

The model: token and learned position embeddings, pre-LN blocks (causal
multi-head attention, a GELU MLP of width 4 D), a final LayerNorm and a
language-model head, tied to the token embedding (GPT-2's) or untied;
GPT-2's initialisation (weights N(0, 0.02^2), biases 0). No
dropout, so that a step is deterministic and comparable with PyTorch's.
The attention is written out as MatMul -> scale -> add of the causal mask
-> Softmax -> MatMul, the pattern the importer fuses into one attention op;
the mask is computed from the positions (0 on and below the diagonal,
-1e9 above), which the export writes as Range / Greater / Cast / Mul and
the importer recognises as causal from the positions, in O(T), without
making the [T, T] mask.

    gpt_model.py OUT.onnx [--layers 2] [--width 64] [--heads 4] [--vocab 256]
                 [--context 32] [--untied] [--opset 14] [--seed 0]

The exported model takes int64 ids[B,T] (input "ids", both axes dynamic, T up
to --context) and gives logits[B,T,vocab] (output "logits"); its parameters
keep their PyTorch names. With --state OUT.pt the initial state_dict is saved
too (the tests' PyTorch reference starts from it).
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(width // heads)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        # The causal mask from the sequence's positions (the importer checks
        # the positions, never making the [t, t] mask): -1e9 above the
        # diagonal, where a key follows its query, 0 elsewhere. A
        # [context, context] buffer would put context^2 floats per layer
        # into the file.
        i = torch.arange(t, device=x.device)
        scores = scores + (i.unsqueeze(0) > i.unsqueeze(1)).to(scores.dtype) * -1e9
        y = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads, context)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers=2, width=64, heads=4, vocab=256, context=32, tied=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        if tied:
            self.head.weight = self.tok.weight
        self.apply(self._init)

    @staticmethod
    def _init(m):
        """GPT-2's initialisation: weights from N(0, 0.02^2), biases 0 (the
        default N(0, 1) embedding, tied to the head, would start the logits
        at a scale of sqrt(width))."""
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids):
        x = self.tok(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def export(model, path, batch, context, opset):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export_onnx

    # The axes are dynamic: a short example exports the same graph, without
    # tracing a [batch, heads, context, context] score tensor (17 GB at
    # 16k tokens).
    ids = torch.zeros(batch, min(context, 64), dtype=torch.int64)
    export_onnx.export(model, ids, path, opset_version=opset, input_names=["ids"],
                       output_names=["logits"], dynamic_axes={"ids": {0: "B", 1: "T"}})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--opset", type=int, default=14)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--state", help="also save the initial state_dict here")
    a = p.parse_args()
    if a.width % a.heads:
        sys.exit(f"--width {a.width} must be a multiple of --heads {a.heads}")
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.width, a.heads, a.vocab, a.context, tied=not a.untied)
    export(model, a.out, 2, a.context, a.opset)
    if a.state:
        torch.save(model.state_dict(), a.state)


if __name__ == "__main__":
    main()
