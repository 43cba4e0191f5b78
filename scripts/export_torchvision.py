#!/usr/bin/env python3
"""Exports a torchvision classifier (random weights) for lms::import_onnx,
with scripts/export_onnx.py's flags (opset 14, training mode, no constant
folding, the trainable parameters in metadata_props).

    export_torchvision.py MODEL N,C,H,W out.onnx [--classes K] [--seed S] [--opset 14]

MODEL: resnet18, resnet50, vgg11_bn, densenet121, mobilenet_v2,
efficientnet_b0 (stochastic depth set to 0, which the export needs),
vit_b_16 (its image_size the shape's side), or
resnet18-digits: resnet18 for small single-channel images (the first
convolution 3x3, stride 1, one input channel, and no max pooling, as
ResNets are adapted to CIFAR's 32x32), which examples/digits trains. The
batch in the shape only sets the export's example; lms::import_onnx takes
another (lms-bench onnx --input input:B,3,224,224).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_onnx  # noqa: E402

MODELS = ("resnet18", "resnet50", "vgg11_bn", "densenet121", "mobilenet_v2", "efficientnet_b0",
          "resnet18-digits", "vit_b_16")


def build(name, classes, side):
    import torchvision
    if name not in MODELS:
        sys.exit("export_torchvision.py: unknown model %r; allowed are %s" % (name, ", ".join(MODELS)))
    from torch import nn
    kwargs = {"num_classes": classes}
    if name == "efficientnet_b0":
        kwargs["stochastic_depth_prob"] = 0.0
    if name == "vit_b_16":  # its position table is sized for the input's side
        kwargs["image_size"] = side
    if name == "resnet18-digits":
        model = torchvision.models.resnet18(**kwargs)
        model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
        return model
    return getattr(torchvision.models, name)(**kwargs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("shape", help="example input N,C,H,W")
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--opset", type=int, default=14, help="ONNX opset (14 to 17)")
    a = p.parse_args()
    import torch
    torch.manual_seed(a.seed)
    print("export_torchvision: %s, seed %d" % (a.model, a.seed))
    shape = [int(d) for d in a.shape.split(",")]
    model = build(a.model, a.classes, shape[-1]).train()
    # vit_b_16 reshapes by the traced batch: a dynamic batch axis keeps it
    # a Shape computation that the importer folds for any batch.
    dynamic = {"input": {0: "B"}} if a.model == "vit_b_16" else None
    export_onnx.export(model, torch.randn(shape), a.out, opset_version=a.opset,
                       dynamic_axes=dynamic)


if __name__ == "__main__":
    main()
