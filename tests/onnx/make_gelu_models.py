#!/usr/bin/env python3
"""Writes the models of tests/onnx/gelu_import_test.cc, which runs this at
test time (nothing is committed):

- gelu_mlp_opset14.onnx, gelu_mlp_opset17.onnx: Linear(8, 8) -> GELU ->
  Linear(8, 4) exported by scripts/export_onnx.py (training mode, no
  constant folding), where torch writes nn.GELU() as Div(x, 1.4142135) ->
  Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5);
- gelu_mlp_ref.txt: "NAME COUNT VALUES..." lines (tests/onnx/reference.h): the input x [4,8], the target
  [4,4], PyTorch's output, its mse_loss against the target and the
  gradients of the parameters (PyTorch names);
- gelu_mul_form.onnx: the same chain written by hand with Mul(0.70710677, x)
  in place of the Div, every operand order swapped and the constants as
  initializers;
- gelu_wrong_constant.onnx: the chain with Add(., 2), which is not GELU;
- gelu_erf_is_output.onnx: the GELU chain whose Erf output is also a graph
  output, which one gelu node cannot give.

    make_gelu_models.py OUT_DIR

Exit status 77 when torch or onnx cannot be imported. Seed: SEED, printed.
"""
import math
import os
import sys

try:
    import onnx
    from onnx import TensorProto, helper
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError:
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402

SEED = 2025


def write_reference(model, path):
    x = torch.randn(4, 8)
    target = torch.randn(4, 4)
    y = model(x)
    loss = F.mse_loss(y, target)
    loss.backward()
    rows = {"x": x, "target": target, "y": y, "loss": loss}
    for name, p in model.named_parameters():
        rows[name + "/grad"] = p.grad
    with open(path, "w") as f:
        for name, t in rows.items():
            values = t.detach().reshape(-1).tolist()
            f.write("%s %d %s\n" % (name, len(values), " ".join("%.9g" % v for v in values)))


def hand_chain(path, scale_name, scale, add_one, erf_is_output=False):
    """x [2,3] -> the five-node chain -> y, constants as initializers; with
    erf_is_output, Erf's output is a graph output too."""
    nodes = [
        helper.make_node("Mul", [scale_name, "x"], ["d"], name="scale"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["one", "e"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "x"], ["m"], name="mul"),
        helper.make_node("Mul", ["half", "m"], ["y"], name="half_mul"),
    ]
    inits = [helper.make_tensor(scale_name, TensorProto.FLOAT, [], [scale]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [add_one]),
             helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    if erf_is_output:
        outputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3]))
    graph = helper.make_graph(nodes, "gelu", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    ], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              producer_name="make_gelu_models")
    onnx.save(model, path)


def main(out_dir):
    print("make_gelu_models: seed", SEED)
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4)).train()
    for opset in (14, 17):
        export_onnx.export(model, torch.randn(4, 8),
                           os.path.join(out_dir, "gelu_mlp_opset%d.onnx" % opset), opset)
    write_reference(model, os.path.join(out_dir, "gelu_mlp_ref.txt"))
    hand_chain(os.path.join(out_dir, "gelu_mul_form.onnx"), "inv_sqrt2", 1 / math.sqrt(2), 1.0)
    hand_chain(os.path.join(out_dir, "gelu_wrong_constant.onnx"), "inv_sqrt2", 1 / math.sqrt(2),
               2.0)
    hand_chain(os.path.join(out_dir, "gelu_erf_is_output.onnx"), "inv_sqrt2", 1 / math.sqrt(2),
               1.0, erf_is_output=True)


if __name__ == "__main__":
    main(sys.argv[1])
