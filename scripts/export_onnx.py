#!/usr/bin/env python3
"""Exports a PyTorch model to ONNX the way lms::import_onnx expects it.

    import export_onnx
    export_onnx.export(model, x, "m.onnx")

torch.onnx.export with opset 14, TrainingMode.TRAINING and no constant
folding keeps every parameter as an initializer under its PyTorch name
("layer1.0.conv1.weight") and BatchNormalization in training mode. The list of
parameters with requires_grad is written to the model's metadata_props under
"lms.trainable" (comma-separated), which the importer reads to split the
initializers into trainable parameters and non-trainable state.

Command line (a model saved whole with torch.save):
    export_onnx.py model.pt input_shape out.onnx     e.g. 2,1,64,64
"""
import sys

TRAINABLE_KEY = "lms.trainable"


def export(model, example_input, path, opset_version=14, input_names=("input",),
           output_names=("output",), dynamic_axes=None):
    import onnx
    import torch

    import inspect

    # PyTorch 2.9 and later export through torch.export ("dynamo") unless
    # told not to; the TorchScript exporter is the one that keeps the
    # training-mode graph and parameter names described above.
    legacy = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        legacy["dynamo"] = False
    torch.onnx.export(model, example_input, path, opset_version=opset_version,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=list(input_names),
                      output_names=list(output_names), dynamic_axes=dynamic_axes, **legacy)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    proto = onnx.load(path)
    entry = proto.metadata_props.add()
    entry.key = TRAINABLE_KEY
    entry.value = ",".join(trainable)
    onnx.save(proto, path)


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    import torch
    model = torch.load(argv[1])
    shape = [int(d) for d in argv[2].split(",")]
    export(model, torch.zeros(shape), argv[3])


if __name__ == "__main__":
    main(sys.argv)
