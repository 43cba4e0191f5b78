#!/usr/bin/env python3
"""Generates the models of tests/onnx/import_errors_test.cc into
tests/data/onnx/errors/: each one a case the importer must refuse with a
clear message (and external_ok.onnx, one it must read).

    make_error_fixtures.py OUT_DIR

Built with onnx.helper, except eval_export.onnx and linear.onnx, which come
from torch.onnx.export (seed 7, printed).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import export_onnx  # noqa: E402


def model(nodes, inputs, outputs, inits=(), opset=14, domain=""):
    g = helper.make_graph(nodes, "case", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)],
                          producer_name="make_error_fixtures")
    m.ir_version = 8
    return m


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def conv_model(**attrs):
    w = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32) * 0.1, "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", kernel_shape=[3, 3], **attrs)
    return model([node], [vi("x", [1, 4, 8, 8])], [vi("y", None)], [w])


def write(out_dir, name, m):
    onnx.save(m, os.path.join(out_dir, name))


def external(out_dir, name, data_file, create):
    w = np.arange(16, dtype=np.float32).reshape(4, 4, 1, 1) / 16
    t = numpy_helper.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", data_file), ("offset", "0"), ("length", str(w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    if create:
        with open(os.path.join(out_dir, data_file), "wb") as f:
            f.write(w.tobytes())
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", kernel_shape=[1, 1])
    write(out_dir, name, model([node], [vi("x", [1, 4, 2, 2])], [vi("y", None)], [t]))


def torch_cases(out_dir):
    import torch
    from torch import nn
    print("make_error_fixtures: seed 7")
    torch.manual_seed(7)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()
    torch.onnx.export(net, torch.zeros(1, 1, 8, 8), os.path.join(out_dir, "eval_export.onnx"),
                      opset_version=14)
    export_onnx.export(nn.Linear(16, 2), torch.zeros(2, 16), os.path.join(out_dir, "linear.onnx"))


def main(out_dir):
    write(out_dir, "grouped_conv.onnx", conv_model(group=2))
    write(out_dir, "asymmetric_pads.onnx", conv_model(pads=[0, 0, 1, 1]))
    write(out_dir, "unknown_domain.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", [2, 3])],
                [vi("y", None)], domain="com.example", opset=1))
    write(out_dir, "opset18.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", [2, 3])],
                [vi("y", None)], opset=18))
    write(out_dir, "broadcast_add.onnx",
          model([helper.make_node("Add", ["a", "b"], ["y"], name="add1")],
                [vi("a", [2, 3, 4, 4]), vi("b", [1, 3, 1, 1])], [vi("y", None)]))
    ratio = numpy_helper.from_array(np.array(0.5, np.float32), "ratio")
    train = numpy_helper.from_array(np.array(True), "train")
    write(out_dir, "dropout.onnx",
          model([helper.make_node("Dropout", ["x", "ratio", "train"], ["y"], name="drop1")],
                [vi("x", [2, 3])], [vi("y", None)], [ratio, train]))
    write(out_dir, "symbolic_batch.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", ["N", 3])],
                [vi("y", None)]))
    external(out_dir, "external_missing.onnx", "missing_weights.bin", create=False)
    external(out_dir, "external_ok.onnx", "external_ok.bin", create=True)
    torch_cases(out_dir)


if __name__ == "__main__":
    main(sys.argv[1])
