#!/usr/bin/env python3
"""Writes a torchvision model (or the U-Net of make_unet_fixture.py) as ONNX
and PyTorch's reference of its training, for
tests/onnx/torchvision_parity_test.cc.

    make_torchvision_reference.py MODEL OUT_DIR

MODEL: resnet18, resnet50, vgg11_bn, densenet121, mobilenet_v2,
efficientnet_b0, unet, or the GPT-2-style decoder of scripts/gpt_model.py:
gpt (tied head, opset 14: LayerNorm and GELU as PyTorch decomposes them)
or gpt_opset17 (untied head, opset 17: LayerNormalization); or vit /
vit_opset17, torchvision's VisionTransformer (the class of vit_b_16) at a
small size: 32x32 images in 8x8 patches, 2 layers, 4 heads, width 64, MLP
128, its zero-initialised head drawn from N(0, 0.02^2) instead. Writes OUT_DIR/MODEL.onnx (scripts/export_onnx.py:
opset 14, training mode, parameters as named initializers) and
OUT_DIR/MODEL.ref (the binary format below). Nothing is committed: the test
runs this script into its build folder. OUT_DIR/MODEL.stamp holds a hash of
this script, scripts/export_onnx.py, make_unet_fixture.py, the torch and
torchvision versions and MODEL; when it matches, the files are current and
the script exits at once ("cached"). Exit status 77: torch, torchvision or
onnx cannot be imported (the test skips, printing the reason).

The model, all in training mode:
 - torchvision's, weights=None, num_classes=CLASSES; efficientnet_b0 with
   stochastic_depth_prob=0. Every nn.Dropout's p is set to 0 before the
   export (the classifiers of vgg11_bn, mobilenet_v2, efficientnet_b0):
   PyTorch's dropout masks come from its generator, which lms cannot
   reproduce, and lms::import_onnx removes a Dropout of ratio 0;
 - unet: SmallUNet of make_unet_fixture.py (concatenated skips), with an
   MSE loss against a target drawn from U(0, 1); the classifiers take
   cross-entropy (mean over the batch) against int64 labels;
 - every BatchNorm2d's weight drawn from U(0.5, 1.5) and bias from
   U(-0.5, 0.5) instead of 1 and 0: at that symmetric start, a batch norm
   followed by a ReLU (or a ReLU6 that does not clip) and a per-channel
   (depthwise) convolution into another batch norm has a weight gradient of
   exactly 0 by scale invariance, which both frameworks return as round-off
   and no relative error can compare.
The GPTs (2 layers, width 64, 4 heads, a 64-token vocabulary, context 32)
take int64 ids [2, 32] and train with cross-entropy over every position
(F.cross_entropy(logits.view(-1, V), labels.view(-1))) against random next
tokens, with torch.optim.Adam (lr ADAM_LR) rather than SGD; the reference
then holds beta1, beta2 and eps too.
Input shapes (SHAPES): batch 2 at 64x64, but vgg11_bn at batch 1, 224x224:
its AdaptiveAvgPool2d((7, 7)) exports only when the feature map divides 7,
so 224x224 (a 7x7 map) is the least input, and batch 1 halves the largest
model's time (its batch norms still see 49 values per channel at 7x7).

The reference starts from the values in the exported file (read back with
onnx), so both frameworks start from the same bits whatever the export did
to the running statistics. Then STEPS steps of torch.optim.SGD(lr=LR or
MODEL_LR, momentum=MOMENTUM) (dampening 0, no Nesterov: buf = m * buf + g;
p -= lr * buf, as lms::Sgd) on the same batch. Tensors:
  input, labels (int64) or target, lr and momentum (what the test trains
  with), output (step 1's logits or U-Net output),
  loss (step 1), step_loss (one per step), <param>/grad (step 1's gradient
  of every parameter), trained/<name> (every parameter and BN running
  statistic after the last step), and fp32_error/<each of those>: PyTorch's
  own float32 error, the relative L2 distance of that float32 result from
  the same training run in float64 from the same values (per step for
  step_loss), the larger of the runs on one thread and on two. Measured, it is far above 1e-4 for the deep batch-norm
  networks at these small inputs (resnet50: about 1% on most gradients,
  the error growing through the 2x2 maps of layer4, whose batch norms see
  8 values per channel), so the test holds lms to max(1e-4, a multiple of
  it), not to 1e-4 alone.

Mixed precision (AUTOCAST models: resnet18, gpt, vit): the same model from
the same values trained AUTOCAST_STEPS steps with the forward pass and the
loss under torch.autocast("cpu", dtype=torch.bfloat16) (float32 master
weights; the optimizer as above). Tensors: bf16/loss and bf16/<param>/grad
(step 1), bf16/step_loss (one per step), bf16/fp32_step_loss (the same
steps without autocast: how far bf16's trajectory drifts from float32's),
and the float64 run's step 1 as f64/loss and f64/<param>/grad, the exact
values both are compared with.

Binary reference format (read by tests/onnx/reference.h,
read_binary_reference): ASCII header lines, then raw data:
  lms-reference 1
  # comment lines
  <name> <f32|i64> <count>      one per tensor, in data order
  data                          then each tensor's count values,
                                little-endian float32 or int64, no padding.

Seeds: torch.manual_seed(SEED) before building the model, then the BN
affine parameters, the input and the labels (or target) are drawn in that
order. Printed when run.
"""
import copy
import hashlib
import importlib.metadata
import importlib.util
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")

SEED = 20241
STEPS = 3
# Small enough that float32 round-off does not decide the trajectory. At
# 0.005 one element of resnet18's layer2.1 ReLU input, -3.6e-6 in lms and
# +1.2e-5 in PyTorch after one step, takes the other side of the kink and
# moves its step-2 gradients by 1%, conv1.weight after 3 steps by 1.4e-3;
# at 0.02 vgg11_bn's loss is 0 at step 2. At 1e-4 the loss still falls
# (resnet18: 2.89, 2.46, 2.00).
LR = 0.0001
# resnet50's gradients at these inputs are only float32-accurate to about 1%
# (fp32_errors), and at LR a step moves its loss by 0.5: the next losses
# then differ by 3% and 12% between lms and PyTorch, and by 0.5% and 2%
# between PyTorch's own float32 and float64. A tenth of it keeps 3 steps
# comparable. The U-Net's MSE gradients are small: at LR its loss would not
# move in the sixth digit.
MODEL_LR = {"resnet50": 0.00001, "unet": 0.05}
MOMENTUM = 0.9
CLASSES = 10
SHAPES = {
    "resnet18": (2, 3, 64, 64),
    "resnet50": (2, 3, 64, 64),
    "vgg11_bn": (1, 3, 224, 224),
    "densenet121": (2, 3, 64, 64),
    "mobilenet_v2": (2, 3, 64, 64),
    "efficientnet_b0": (2, 3, 64, 64),
    "unet": (2, 1, 64, 64),
    "gpt": (2, 32),
    "gpt_opset17": (2, 32),
    "vit": (2, 3, 32, 32),
    "vit_opset17": (2, 3, 32, 32),
}
OPSETS = {"gpt_opset17": 17, "vit_opset17": 17}
AUTOCAST = {"resnet18", "gpt", "vit"}
AUTOCAST_STEPS = 20
GPTS = {"gpt": dict(tied=True), "gpt_opset17": dict(tied=False)}
VOCAB = 64
ADAM_LR = 0.001


def stamp(model):
    """What the files depend on: the scripts' text, the versions, the model."""
    h = hashlib.sha256()
    for path in (__file__, os.path.join(SCRIPTS, "export_onnx.py"),
                 os.path.join(SCRIPTS, "gpt_model.py"),
                 os.path.join(HERE, "make_unet_fixture.py")):
        with open(path, "rb") as f:
            h.update(f.read())
    for package in ("torch", "torchvision", "onnx"):
        h.update(importlib.metadata.version(package).encode())
    h.update(model.encode())
    return h.hexdigest()


def build(name):
    import torch
    import torchvision
    from torch import nn
    if name in GPTS:
        sys.path.insert(0, SCRIPTS)
        import gpt_model
        return gpt_model.GPT(layers=2, width=64, heads=4, vocab=VOCAB, context=32,
                             tied=GPTS[name]["tied"]).train()
    if name.startswith("vit"):
        from torchvision.models.vision_transformer import VisionTransformer
        vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                                hidden_dim=64, mlp_dim=128, num_classes=CLASSES)
        # torchvision starts the head at zero, which makes every other
        # gradient of the first step exactly zero; a small random head
        # lets the step's gradients be compared.
        nn.init.normal_(vit.heads.head.weight, std=0.02)
        return vit.train()
    if name == "unet":
        sys.path.insert(0, HERE)
        import make_unet_fixture
        model = make_unet_fixture.SmallUNet()
    else:
        kwargs = {"weights": None, "num_classes": CLASSES}
        if name == "efficientnet_b0":
            kwargs["stochastic_depth_prob"] = 0.0
        model = getattr(torchvision.models, name)(**kwargs)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.5, 0.5)
    return model.train()


def load_file_values(model, path):
    """Copies the initializers of the ONNX file at `path` (parameters and
    running statistics, under their PyTorch names) into `model`."""
    import onnx
    import torch
    from onnx import numpy_helper
    values = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name in values:
                t.copy_(torch.from_numpy(values[name].copy()).reshape(t.shape))


def trained_state(model):
    """The parameters and the batch norms' running statistics: what lms
    keeps as persistent tensors (a constant buffer such as the GPT's causal
    mask is folded into the graph)."""
    state = dict(model.named_parameters())
    for n, t in model.named_buffers():
        if n.endswith("running_mean") or n.endswith("running_var"):
            state[n] = t
    return state.items()


def training_steps(model, x, target, loss_fn, lr, adam, steps, bf16=False):
    """`steps` steps of SGD (Adam for the GPTs) on one batch, the forward
    pass and the loss under torch.autocast("cpu", bfloat16) when `bf16`:
    yields (step, output, loss) after each backward pass, before the
    optimizer's step."""
    import contextlib
    import torch
    if adam:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    for step in range(steps):
        opt.zero_grad()
        with (torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()):
            y = model(x)
            loss = loss_fn(y, target)
        loss.backward()
        yield step, y, loss
        opt.step()


def train(model, x, target, loss_fn, lr, adam):
    """STEPS steps on one batch; the tensors of the reference."""
    import torch
    out = []
    losses = []
    for step, y, loss in training_steps(model, x, target, loss_fn, lr, adam, STEPS):
        if step == 0:
            out += [("output", y), ("loss", loss)]
            out += [(n + "/grad", p.grad.clone()) for n, p in model.named_parameters()]
        losses.append(loss.detach().reshape(1))
    out.append(("step_loss", torch.cat(losses)))
    out += [("trained/" + n, t) for n, t in trained_state(model)]
    return out


def autocast_train(model, x, target, loss_fn, lr, adam, bf16=True):
    """AUTOCAST_STEPS steps under torch.autocast("cpu", bfloat16): step 1's
    loss and gradients and every step's loss, named bf16/...; with
    bf16=False the float32 steps' losses alone, bf16/fp32_step_loss."""
    import torch
    out = []
    losses = []
    for step, _, loss in training_steps(model, x, target, loss_fn, lr, adam, AUTOCAST_STEPS,
                                        bf16):
        if step == 0 and bf16:
            out.append(("bf16/loss", loss.float()))
            out += [("bf16/" + n + "/grad", p.grad.clone()) for n, p in model.named_parameters()]
        losses.append(loss.detach().float().reshape(1))
    out.append(("bf16/step_loss" if bf16 else "bf16/fp32_step_loss", torch.cat(losses)))
    return out


def fp32_errors(tensors32, tensors64):
    """PyTorch's own float32 error of each tensor: the relative L2 distance
    of its float32 result from the same training in float64 (per step for
    step_loss). Where it is large the float32 result depends on the order
    of the sums, and no other implementation can be held closer to it."""
    out = []
    for (name, a), (_, b) in zip(tensors32, tensors64):
        a, b = a.detach().double(), b.detach().double()
        if name == "step_loss":
            e = (a - b).abs() / b.abs().clamp_min(1e-300)
        else:
            e = ((a - b).norm() / b.norm().clamp_min(1e-300)).reshape(1)
        out.append(("fp32_error/" + name, e.float()))
    return out


def write_reference(path, comment, tensors):
    import numpy as np
    arrays = []
    for name, t in tensors:
        a = t.detach().cpu().numpy().reshape(-1)
        a = a.astype("<i8") if a.dtype == np.int64 else a.astype("<f4")
        arrays.append((name, a))
    with open(path + ".tmp", "wb") as f:
        f.write(b"lms-reference 1\n# %s\n" % comment.encode())
        for name, a in arrays:
            kind = "i64" if a.dtype == np.dtype("<i8") else "f32"
            f.write(b"%s %s %d\n" % (name.encode(), kind.encode(), a.size))
        f.write(b"data\n")
        for _, a in arrays:
            f.write(a.tobytes())
    os.replace(path + ".tmp", path)


def main(model_name, out_dir):
    if model_name not in SHAPES:
        sys.exit("make_torchvision_reference.py: unknown model %r; allowed are %s" %
                 (model_name, ", ".join(SHAPES)))
    for package in ("torch", "torchvision", "onnx", "numpy"):
        if importlib.util.find_spec(package) is None:
            print("make_torchvision_reference.py: %s is not importable" % package)
            sys.exit(77)
    os.makedirs(out_dir, exist_ok=True)
    onnx_path = os.path.join(out_dir, model_name + ".onnx")
    ref_path = os.path.join(out_dir, model_name + ".ref")
    stamp_path = os.path.join(out_dir, model_name + ".stamp")
    key = stamp(model_name)
    if all(os.path.exists(p) for p in (onnx_path, ref_path, stamp_path)):
        with open(stamp_path) as f:
            if f.read().strip() == key:
                print("make_torchvision_reference: %s cached (seed %d)" % (model_name, SEED))
                return

    import torch
    from torch import nn
    sys.path.insert(0, SCRIPTS)
    import export_onnx
    print("make_torchvision_reference: %s, seed %d" % (model_name, SEED))
    torch.manual_seed(SEED)
    model = build(model_name)
    shape = SHAPES[model_name]
    gpt = model_name in GPTS
    x = torch.randint(0, VOCAB, shape) if gpt else torch.randn(shape)
    if gpt:
        target, target_name = torch.randint(0, VOCAB, shape), "labels"

        def loss_fn(y, t):
            return nn.functional.cross_entropy(y.reshape(-1, VOCAB), t.reshape(-1))
    elif model_name == "unet":
        target, target_name = torch.rand(shape), "target"
        loss_fn = nn.functional.mse_loss
    else:
        target, target_name = torch.randint(0, CLASSES, (shape[0],)), "labels"
        loss_fn = nn.functional.cross_entropy
    # The export runs the model once in training mode; do it on a copy. Its
    # warnings (one per batch norm's num_batches_tracked, which lms does not
    # keep) would bury the test's output.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opset = OPSETS.get(model_name, 14)
        export_onnx.export(copy.deepcopy(model), x, onnx_path, opset_version=opset)
    load_file_values(model, onnx_path)
    model64 = copy.deepcopy(model).double()
    model_bf16, model_fp32 = copy.deepcopy(model), copy.deepcopy(model)
    model_threads = copy.deepcopy(model)
    lr = ADAM_LR if gpt else MODEL_LR.get(model_name, LR)
    trained = train(model, x, target, loss_fn, lr, gpt)
    target64 = target if target.dtype == torch.int64 else target.double()
    x64 = x if x.dtype == torch.int64 else x.double()
    trained64 = train(model64, x64, target64, loss_fn, lr, gpt)
    # PyTorch's float32 result moves with its thread count (its sums split
    # by thread): on an ill-conditioned gradient (densenet121's) one thread
    # count lands 2e-5 from float64 and another 5e-2. Its own error is the
    # larger of one thread's and two threads' (ctest runs tests with one).
    threads = torch.get_num_threads()
    torch.set_num_threads(2 if threads == 1 else 1)
    trained_threads = train(model_threads, x, target, loss_fn, lr, gpt)
    torch.set_num_threads(threads)
    errors = [(name, torch.maximum(a, b)) for (name, a), (_, b) in
              zip(fp32_errors(trained, trained64), fp32_errors(trained_threads, trained64))]
    if model_name in AUTOCAST:
        errors += autocast_train(model_bf16, x, target, loss_fn, lr, gpt)
        errors += autocast_train(model_fp32, x, target, loss_fn, lr, gpt, bf16=False)
        errors += [("f64/" + n, t.float()) for n, t in trained64
                   if n == "loss" or n.endswith("/grad")]
    if gpt:  # torch.optim.Adam's defaults
        optimizer = [("lr", torch.tensor([lr])), ("beta1", torch.tensor([0.9])),
                     ("beta2", torch.tensor([0.999])), ("eps", torch.tensor([1e-8]))]
    else:
        optimizer = [("lr", torch.tensor([lr])), ("momentum", torch.tensor([MOMENTUM]))]
    tensors = [("input", x), (target_name, target)] + optimizer + trained + errors
    comment = "tests/onnx/make_torchvision_reference.py %s, seed %d, torch %s" % (
        model_name, SEED, torch.__version__)
    write_reference(ref_path, comment, tensors)
    with open(stamp_path, "w") as f:
        f.write(key + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
