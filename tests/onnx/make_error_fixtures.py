#!/usr/bin/env python3
"""Generates the models of tests/onnx/import_errors_test.cc into
tests/data/onnx/errors/: each one a case the importer must refuse with a
clear message (and external_ok.onnx, embedding.onnx, linear.onnx,
transpose_matmul.onnx, transpose_gemm.onnx, double_transpose.onnx and
clip6.onnx, which it must read; ones_like.onnx, which it reads at small
shapes and, out of host memory at large ones, refuses with
ResourceExhausted).

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


def linear_model(op, a_shape, w_shape, bias_shape=None, **attrs):
    """Gemm / MatMul of a fed A by a weight initializer w (and bias c)."""
    w = numpy_helper.from_array(np.ones(w_shape, np.float32) * 0.1, "w")
    inits, inputs = [w], ["a", "w"]
    if bias_shape is not None:
        inits.append(numpy_helper.from_array(np.zeros(bias_shape, np.float32), "c"))
        inputs.append("c")
    node = helper.make_node(op, inputs, ["y"], name="fc1", **attrs)
    return model([node], [vi("a", a_shape)], [vi("y", None)], inits)


def transpose_model(reader):
    """y = reader(x, w.T) with w[4,3]; for Add, w is trainable by the metadata
    lms.trainable (the default rule finds it through the Transpose for MatMul)."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 12, "w")
    x_shape = [2, 3] if reader == "MatMul" else [3, 4]
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="t1", perm=[1, 0]),
             helper.make_node(reader, ["x", "wt"], ["y"], name="reader1")]
    m = model(nodes, [vi("x", x_shape)], [vi("y", None)], [w])
    if reader == "Add":
        entry = m.metadata_props.add()
        entry.key, entry.value = export_onnx.TRAINABLE_KEY, "w"
    return m


def transpose_gemm_model():
    """y = x @ (w.T).T + c with w[4,3] = arange(12) / 12 transposed into Gemm
    input B with transB = 1, and c[1,3] = [0.5, 1, 1.5]."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 12, "w")
    c = numpy_helper.from_array(np.array([[0.5, 1, 1.5]], np.float32), "c")
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="t1"),
             helper.make_node("Gemm", ["x", "wt", "c"], ["y"], name="fc1", transB=1)]
    return model(nodes, [vi("x", [2, 4])], [vi("y", None)], [w, c])


def double_transpose_model():
    """y = x @ Transpose(Transpose(Identity(w))) with w[3,4] = arange(12) / 12."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 12, "w")
    n = helper.make_node
    nodes = [n("Identity", ["w"], ["wi"], name="id1"),
             n("Transpose", ["wi"], ["wt"], name="t1"),
             n("Transpose", ["wt"], ["wtt"], name="t2", perm=[1, 0]),
             n("MatMul", ["x", "wtt"], ["y"], name="fc1")]
    return model(nodes, [vi("x", [2, 3])], [vi("y", None)], [w])


def write(out_dir, name, m):
    onnx.save(m, os.path.join(out_dir, name))


def write_dropout_cases(out_dir):
    """Training-mode Dropout lms refuses: ratio 1, and a used mask output."""
    train = numpy_helper.from_array(np.array(True), "train")
    ratio = numpy_helper.from_array(np.array(1.0, np.float32), "ratio")
    write(out_dir, "dropout.onnx",
          model([helper.make_node("Dropout", ["x", "ratio", "train"], ["y"], name="drop1")],
                [vi("x", [2, 3])], [vi("y", None)], [ratio, train]))
    ratio = numpy_helper.from_array(np.array(0.5, np.float32), "ratio")
    write(out_dir, "dropout_mask.onnx",
          model([helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"],
                                  name="drop2")],
                [vi("x", [2, 3])], [vi("y", None), vi("mask", None, TensorProto.BOOL)],
                [ratio, train]))


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


def folding_model():
    """relu(x[:, :C // 2]) with C // 2 computed from Shape at run time, then
    every identity the importer removes; the batch is symbolic."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"], name="shape"),
        n("Constant", [], ["one"], name="one", value=i64("one", 1)),
        n("Gather", ["shape", "one"], ["channels"], name="channels", axis=0),
        n("Constant", [], ["two"], name="two", value=i64("two", 2)),
        n("Div", ["channels", "two"], ["half"], name="half"),
        n("Constant", [], ["axis0"], name="axis0", value=i64("axis0", [0])),
        n("Unsqueeze", ["half", "axis0"], ["ends"], name="ends"),
        n("Constant", [], ["len1"], name="len1", value=i64("len1", [1])),
        n("ConstantOfShape", ["len1"], ["starts"], name="starts", value=i64("v", [0])),
        n("Cast", ["ends"], ["ends64"], name="cast_ends", to=TensorProto.INT64),
        n("Constant", [], ["axes"], name="axes", value=i64("axes", [1])),
        n("Slice", ["x", "starts", "ends64", "axes"], ["half_x"], name="slice"),
        n("Identity", ["half_x"], ["id"], name="identity"),
        n("Dropout", ["id"], ["dropped"], name="dropout"),
        n("Constant", [], ["pads"], name="pads", value=i64("pads", [0] * 8)),
        n("Pad", ["dropped", "pads"], ["padded"], name="pad"),
        n("AveragePool", ["padded"], ["pooled"], name="avg1", kernel_shape=[1, 1]),
        n("Concat", ["pooled"], ["joined"], name="concat1", axis=1),
        n("Cast", ["joined"], ["as_float"], name="cast_float", to=TensorProto.FLOAT),
        n("Relu", ["as_float"], ["y"], name="relu"),
    ]
    return model(nodes, [vi("x", ["N", 4, 4, 4])], [vi("y", None)])


def ones_like_model():
    """x + ones(x.shape), the ones folded from ConstantOfShape(Shape(x)) for
    the given input shape: an import whose memory grows with the shape (the
    host-memory test of import_memory_test.cc)."""
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"], name="shape"),
        n("ConstantOfShape", ["shape"], ["ones"], name="ones", value=one),
        n("Add", ["x", "ones"], ["y"], name="add"),
    ]
    return model(nodes, [vi("x", ["N", "C"])], [vi("y", None)])


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
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32) * 0.1, "w")
    write(out_dir, "grouped_deconv.onnx",
          model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="deconv1",
                                  kernel_shape=[3, 3], group=2)],
                [vi("x", [1, 4, 8, 8])], [vi("y", None)], [w]))
    write(out_dir, "gemm_alpha.onnx", linear_model("Gemm", [2, 3], [3, 4], alpha=0.5))
    write(out_dir, "gemm_trans_a.onnx", linear_model("Gemm", [3, 2], [3, 4], transA=1))
    write(out_dir, "gemm_bias_rows.onnx", linear_model("Gemm", [2, 3], [3, 4], [2, 4]))
    write(out_dir, "matmul_1d.onnx", linear_model("MatMul", [3], [3, 4]))
    write(out_dir, "transpose_matmul.onnx", transpose_model("MatMul"))
    write(out_dir, "transpose_add.onnx", transpose_model("Add"))
    write(out_dir, "transpose_gemm.onnx", transpose_gemm_model())
    write(out_dir, "double_transpose.onnx", double_transpose_model())
    write(out_dir, "avg_pool_ceil.onnx",
          model([helper.make_node("AveragePool", ["x"], ["y"], name="pool1", kernel_shape=[2, 2],
                                  strides=[2, 2], ceil_mode=1, count_include_pad=1)],
                [vi("x", [1, 2, 5, 5])], [vi("y", None)]))
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32) * 0.1, "w")
    write(out_dir, "pad_conv.onnx",
          model([helper.make_node("Pad", ["x", "pads"], ["p"], name="pad1"),
                 helper.make_node("Conv", ["p", "w"], ["y"], name="conv1", kernel_shape=[3, 3])],
                [vi("x", [1, 2, 5, 5])], [vi("y", None)], [pads, w]))
    # Accepted: q k^T with k read transposed, and an output that takes the
    # second operand's free letter first (the operands swapped).
    for name, eq, b_shape in (("einsum_qk.onnx", "bid,bjd->bij", [2, 4, 3]),
                              ("einsum_swapped.onnx", "bdi,bjd->bji", [2, 4, 3])):
        a_shape = [2, 5, 3] if eq.startswith("bid") else [2, 3, 5]
        write(out_dir, name,
              model([helper.make_node("Einsum", ["a", "b"], ["y"], name="einsum1", equation=eq)],
                    [vi("a", a_shape), vi("b", b_shape)], [vi("y", None)], opset=14))
    write(out_dir, "einsum_three.onnx",
          model([helper.make_node("Einsum", ["a", "b"], ["y"], name="einsum1",
                                  equation="bij,bjk->bk")],
                [vi("a", [2, 3, 4]), vi("b", [2, 4, 5])], [vi("y", None)], opset=14))
    starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([5], np.int64), "ends")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    steps = numpy_helper.from_array(np.array([2], np.int64), "steps")
    write(out_dir, "slice_step.onnx",
          model([helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"],
                                  name="slice1")],
                [vi("x", [2, 8])], [vi("y", None)], [starts, ends, axes, steps]))
    write(out_dir, "clip_dynamic.onnx",
          model([helper.make_node("Clip", ["x", "lo"], ["y"], name="clip1")],
                [vi("x", [2, 3]), vi("lo", [])], [vi("y", None)]))
    write(out_dir, "clip6.onnx",
          model([helper.make_node("Clip", ["x"], ["y"], name="clip1", min=-1.0, max=2.0)],
                [vi("x", [2, 3])], [vi("y", None)], opset=6))
    write(out_dir, "reshape_dynamic.onnx",
          model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape1")],
                [vi("x", [2, 3]), vi("shape", [2], TensorProto.INT64)], [vi("y", None)]))
    write(out_dir, "asymmetric_pads.onnx", conv_model(pads=[0, 0, 1, 1]))
    write(out_dir, "unknown_domain.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", [2, 3])],
                [vi("y", None)], domain="com.example", opset=1))
    write(out_dir, "opset18.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", [2, 3])],
                [vi("y", None)], opset=18))
    write(out_dir, "broadcast_add.onnx",
          model([helper.make_node("Add", ["a", "b"], ["y"], name="add1")],
                [vi("a", [2, 1, 4, 4]), vi("b", [1, 3, 1, 1])], [vi("y", None)]))
    write_dropout_cases(out_dir)
    write(out_dir, "symbolic_batch.onnx",
          model([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", ["N", 3])],
                [vi("y", None)]))
    table = numpy_helper.from_array(np.arange(15, dtype=np.float32).reshape(5, 3) / 10, "table")
    write(out_dir, "embedding.onnx",
          model([helper.make_node("Gather", ["table", "ids"], ["y"], name="embed")],
                [vi("ids", [2, 2], TensorProto.INT64)], [vi("y", None)], [table]))
    write(out_dir, "folding.onnx", folding_model())
    write(out_dir, "ones_like.onnx", ones_like_model())
    external(out_dir, "external_missing.onnx", "missing_weights.bin", create=False)
    external(out_dir, "external_ok.onnx", "external_ok.bin", create=True)
    torch_cases(out_dir)


if __name__ == "__main__":
    main(sys.argv[1])
