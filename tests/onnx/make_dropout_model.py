#!/usr/bin/env python3
"""Writes a small MLP with nn.Dropout(0.2), exported to ONNX in training
mode by scripts/export_onnx.py, for tests/onnx/dropout_import_test.cc,
which runs it at test time (nothing is committed).

Linear(16, 32) -> ReLU -> Dropout(RATIO) -> Linear(32, 4).

    make_dropout_model.py OUT_DIR [RATIO]   (writes dropout_mlp.onnx; RATIO 0.2)

With RATIO 0 the export keeps a Dropout node of ratio 0 with its mask as a
second, unread output, which lms::import_onnx removes.

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

SEED = 2024


def main(out_dir, ratio):
    print("make_dropout_model: seed", SEED)
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(ratio),
                          nn.Linear(32, 4)).train()
    export_onnx.export(model, torch.randn(8, 16), os.path.join(out_dir, "dropout_mlp.onnx"))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.2)
