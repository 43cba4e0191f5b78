#!/usr/bin/env python3
"""Writes a small MLP with nn.LayerNorm, exported by torch.onnx.export in
training mode without constant folding, and its PyTorch reference, for
tests/onnx/layer_norm_import_test.cc, which runs it at test time (nothing
is committed).

Linear(16, 16) -> LayerNorm(16) -> Linear(16, 4), input [8, 16].

    make_layer_norm_model.py OUT_DIR OPSET   (writes ln_mlp.onnx, ln_mlp_ref.txt)
    make_layer_norm_model.py OUT_DIR axis0   (writes ln_axis0.onnx)

At opset 17 the export holds one LayerNormalization node; at opset 14 the
ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div / Mul / Add
decomposition. The reference (tests/onnx/reference.h format) holds the
input, the target, the output, the mse loss and the gradient of every
parameter under its ONNX initializer name. No lms.trainable metadata, so the
importer's default rule picks the trainable initializers.

The second form writes, with onnx.helper, one LayerNormalization-17 over
axis 0 of X[4, 16] (Scale and B [4, 16]), which lms refuses.

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

SEED = 2026


def write_reference(path, tensors):
    with open(path, "w") as f:
        f.write("# make_layer_norm_model.py, seed %d\n" % SEED)
        for name, t in tensors.items():
            values = t.detach().reshape(-1).tolist()
            f.write("%s %d %s\n" % (name, len(values), " ".join("%.9g" % v for v in values)))


def write_axis0(out_dir):
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np
    scale = numpy_helper.from_array(np.ones((4, 16), np.float32), "scale")
    bias = numpy_helper.from_array(np.zeros((4, 16), np.float32), "bias")
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="ln", axis=0)
    graph = helper.make_graph([node], "ln_axis0",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                              [scale, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, os.path.join(out_dir, "ln_axis0.onnx"))


def main(out_dir, opset):
    print("make_layer_norm_model: seed", SEED, "opset", opset)
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 4)).train()
    with torch.no_grad():  # not the default ones / zeros, so both parameters matter
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    x = torch.randn(8, 16)
    target = torch.randn(8, 4)
    torch.onnx.export(model, x, os.path.join(out_dir, "ln_mlp.onnx"), opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["output"])
    y = model(x)
    loss = F.mse_loss(y, target)
    loss.backward()
    ref = {"input": x, "target": target, "output": y, "loss": loss}
    for name, p in model.named_parameters():
        ref[name + "/grad"] = p.grad
    write_reference(os.path.join(out_dir, "ln_mlp_ref.txt"), ref)


if __name__ == "__main__":
    if sys.argv[2] == "axis0":
        write_axis0(sys.argv[1])
    else:
        main(sys.argv[1], int(sys.argv[2]))
