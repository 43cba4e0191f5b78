#!/usr/bin/env python3
"""Which torchvision models lms imports and trains: the coverage table of
bench/README.md, one row per model.

For each model (torchvision 0.14, weights=None, 10 classes, dropout and
stochastic depth 0, as the parity tests), at batch 4 and the stated size:
  0. the loss    cross-entropy on the logits; a segmentation model's dense
                 output gets the mean squared error to a random target;
  1. export      lms.torch.export (training mode, opset 17); an exporter
                 failure is recorded as the exporter's, not a refusal of lms's;
  2. import      lms.import_onnx; a refusal is recorded with its message;
  3. parity      one SGD step (lr 0) on the CPU device and PyTorch's float32
                 step on the same values, each against PyTorch's float64
                 step: the losses (lms / PyTorch / float64) and each one's
                 relative L2 error of all gradients together (in brackets,
                 the worst of any parameter's whose norm is at least 1e-4 of
                 the largest);
  4. lms         the training graph planned by lms.rewrite (default config)
                 on a device halfway between its no-LMS working-set limit and
                 peak, trained 2 steps (SGD lr 0.01) beside the plain graph:
                 "bit-identical" when both losses and every persistent tensor
                 agree bit for bit, with the measured peak the predicted one;
  5. ratio       (--ratio) the largest batch whose plan fits --capacity
                 without LMS and with it (plans only, with the roofline time
                 model; doubling then bisection, up to LIMIT).

    <python with lms and torch> bench/torchvision_coverage.py [--models a,b]
        [--ratio] [--capacity 1GiB] [--out table.md]

The Python must import lms (the wheel; python/tests/run_tests.sh builds one
into build-*/tests/python/venv) and Debian's torch / torchvision. Seeds are
fixed (SEED) and printed. Prints one Markdown row per model as it goes and
writes the table to --out.
"""
import argparse
import copy
import os
import sys
import tempfile
import time
import traceback

import numpy as np
import torch
import torchvision

import lms
import lms.torch

SEED = 1234
BATCH = 4
CLASSES = 10
# --ratio plans these models for a multiple of --capacity (their weights
# alone would not fit it).
CAPACITY_SCALE = {"vgg11": 2, "vgg11_bn": 2}

# (model, constructor keyword arguments, input shape without the batch).
IMAGE = (3, 64, 64)
VIDEO = (3, 8, 64, 64)
MODELS = [
    # Their adaptive pooling exports only where its output divides its
    # input: 6x6 and 7x7, from 224x224.
    ("alexnet", {}, (3, 224, 224)),
    ("vgg11", {}, (3, 224, 224)),
    ("vgg11_bn", {}, (3, 224, 224)),
    ("resnet18", {}, IMAGE),
    ("resnext50_32x4d", {}, IMAGE),
    ("wide_resnet50_2", {}, IMAGE),
    ("squeezenet1_0", {}, IMAGE),
    ("squeezenet1_1", {}, IMAGE),
    ("densenet121", {}, IMAGE),
    ("inception_v3", {"aux_logits": False, "init_weights": True}, (3, 75, 75)),
    ("googlenet", {"aux_logits": False, "init_weights": True}, IMAGE),
    ("shufflenet_v2_x0_5", {}, IMAGE),
    ("mobilenet_v2", {}, IMAGE),
    ("mobilenet_v3_small", {}, IMAGE),
    ("mnasnet0_5", {}, IMAGE),
    ("efficientnet_b0", {}, IMAGE),
    ("efficientnet_v2_s", {}, IMAGE),
    ("regnet_y_400mf", {}, IMAGE),
    ("convnext_tiny", {}, IMAGE),
    ("vit_b_16", {"image_size": 64}, IMAGE),
    # Swin pads its windows with F.pad where a side is not a multiple of 7:
    # not at 224x224.
    ("swin_t", {}, (3, 224, 224)),
    ("maxvit_t", {}, (3, 224, 224)),
    ("r3d_18", {}, VIDEO),
    ("mc3_18", {}, VIDEO),
    ("r2plus1d_18", {}, VIDEO),
    ("fcn_resnet50", {"aux_loss": False, "weights_backbone": None}, IMAGE),
    ("deeplabv3_resnet50", {"aux_loss": False, "weights_backbone": None}, IMAGE),
    ("lraspp_mobilenet_v3_large", {"weights_backbone": None}, IMAGE),
]


class Segmentation(torch.nn.Module):
    """A segmentation model's "out" head: its output dict is not exportable."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def build(name, kwargs):
    """The model with dropout and stochastic depth off, in training mode."""
    ctor = getattr(torchvision.models, name, None)
    segmentation = ctor is None and hasattr(torchvision.models.segmentation, name)
    if ctor is None:
        ctor = getattr(torchvision.models.segmentation, name, None) or getattr(
            torchvision.models.video, name)
    torch.manual_seed(SEED)
    model = ctor(weights=None, num_classes=CLASSES, **kwargs)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
        if hasattr(m, "stochastic_depth_prob"):
            m.stochastic_depth_prob = 0.0
    if segmentation:
        model = Segmentation(model)
    return model.train()


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def short(message, limit=160):
    line = " ".join(str(message).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def loss_of(graph_output, m, dense):
    """Cross-entropy over the classes, or for a dense output (segmentation's
    [N,C,H,W]) the mean squared error to a random target of its shape."""
    if dense:
        return lms.attach_loss(m.graph, graph_output, lms.Mse())
    return lms.attach_loss(m.graph, graph_output, lms.CrossEntropy())


def torch_step(model, x, target, dense):
    model.zero_grad()
    y = model(x)
    loss = (torch.nn.functional.mse_loss(y, target) if dense
            else torch.nn.functional.cross_entropy(y, target))
    loss.backward()
    return loss.item(), {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()
                         if p.grad is not None}


def distance(grads, exact):
    """The relative L2 error of all gradients together from `exact`, and the
    worst of any one parameter's among those whose norm is at least 1e-4 of
    the largest (a gradient that is zero but for rounding, as a batch norm's
    bias in front of another batch norm, ~1e-9, has no relative error to
    speak of)."""
    together = rel_l2(np.concatenate([grads[n].ravel() for n in exact]),
                      np.concatenate([g.ravel() for g in exact.values()]))
    largest = max(float(np.linalg.norm(g)) for g in exact.values())
    worst = max(rel_l2(grads[n], g) for n, g in exact.items()
                if np.linalg.norm(g) >= 1e-4 * largest)
    return f"{together:.0e} ({worst:.0e})"


def feeds_for(shape, dense_shape, rng):
    x = rng.standard_normal((BATCH,) + shape).astype(np.float32)
    if dense_shape is not None:
        return {"input": x, "target": rng.standard_normal(dense_shape).astype(np.float32)}
    return {"input": x, "labels": rng.integers(0, CLASSES, BATCH).astype(np.int64)}


def train_graph(path, shape, batch, lr, dense):
    m = lms.import_onnx(path, inputs={"input": (batch,) + shape})
    loss_of(m.outputs[0], m, dense)
    return m, lms.training_graph(m.graph, lms.Sgd(lr=lr))


def lms_check(path, shape, feeds, dense):
    """Plans at the midpoint of [working-set limit, peak] and trains 2 steps
    with and without LMS; the row's "lms" text."""
    _, plain = train_graph(path, shape, BATCH, 0.01, dense)
    roomy = lms.cpu_device(capacity="8GiB", host_pool="8GiB")
    off = plain.copy()
    ref = lms.rewrite(off, lms.LmsConfig(enabled=False), roomy)
    budget = (ref.working_set_limit_bytes + ref.peak_bytes_after) // 2
    planned = plain.copy()
    device = lms.cpu_device(capacity=budget, host_pool="8GiB")
    rep = lms.rewrite(planned, lms.LmsConfig(), device)
    if not rep.fits:
        return f"no plan fits {lms.format_bytes(budget)}"
    runs = []
    for graph, dev in ((off, roomy), (planned, device)):
        session = lms.Session(graph, dev)
        steps = [session.run(feeds) for _ in range(2)]
        losses = [np.float32(s.loss) for s in steps]
        runs.append((losses, session.state_dict(), max(s.peak_device_bytes for s in steps)))
    (l0, s0, _), (l1, s1, peak) = runs
    same = [a.tobytes() == b.tobytes() for a, b in zip(l0, l1)]
    same += [s0[k].tobytes() == s1[k].tobytes() for k in s0]
    what = f"{len(rep.swapped)} swapped, {len(rep.recomputed)} recomputed"
    if not all(same):
        return f"DIFFERS ({what})"
    exact = "" if peak == rep.peak_bytes_after else f", peak {peak} != {rep.peak_bytes_after}"
    return f"bit-identical ({what}{exact})"


def fits(path, shape, batch, capacity, enabled, dense):
    try:
        _, train = train_graph(path, shape, batch, 0.01, dense)
        # The roofline time model: a measured one would run every kernel at
        # the probed batch; what fits does not depend on it.
        rep = lms.rewrite(train, lms.LmsConfig(enabled=enabled, time_model="roofline"),
                          lms.cpu_device(capacity=capacity, host_pool="16GiB"))
        return rep.fits
    except (RuntimeError, MemoryError, ValueError):  # no plan: the node alone does not fit
        return False


LIMIT = 4096  # the largest batch searched


def largest_batch(path, shape, capacity, enabled, dense):
    """The largest batch up to LIMIT whose plan fits (0: none). The search
    starts at the first of 1, 2, 4 that plans: a batch norm over one value
    per channel (Inception v3's last blocks at batch 1) is refused."""
    lo = next((b for b in (1, 2, 4) if fits(path, shape, b, capacity, enabled, dense)), 0)
    if lo == 0:
        return 0
    hi = lo * 2
    while hi <= LIMIT and fits(path, shape, hi, capacity, enabled, dense):
        lo, hi = hi, hi * 2
    if hi > LIMIT:
        hi = LIMIT + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(path, shape, mid, capacity, enabled, dense) else (lo, mid)
    return lo


def batch_text(b):
    return f">= {b}" if b >= LIMIT else str(b)


def row(name, kwargs, shape, args, work):
    cells = {"model": name, "input": "x".join(map(str, shape)), "imported": "", "parity": "",
             "lms": "", "ratio": ""}
    model = build(name, kwargs)
    path = os.path.join(work, name + ".onnx")
    try:
        lms.torch.export(model, torch.zeros((BATCH,) + shape), path)
    except Exception as e:  # the exporter's own failure
        cells["imported"] = "exporter: " + short(e)
        return cells
    try:
        m = lms.import_onnx(path, inputs={"input": (BATCH,) + shape})
    except Exception as e:
        cells["imported"] = "refused: " + short(e)
        return cells
    cells["imported"] = "yes"
    out_shape = m.graph.shape(m.outputs[0])
    dense = len(out_shape) > 2
    rng = np.random.default_rng(SEED)
    feeds = feeds_for(shape, out_shape if dense else None, rng)
    try:
        loss_of(m.outputs[0], m, dense)
        train = lms.training_graph(m.graph, lms.Sgd(lr=0.0))
        fetches = [train.loss] + [p + "/grad" for p in m.parameters]
        session = lms.Session(train, lms.cpu_device(capacity="8GiB", host_pool="8GiB"),
                              fetches=fetches)
        step = session.run(feeds)
        x = torch.from_numpy(feeds["input"])
        target = torch.from_numpy(feeds["target"] if dense else feeds["labels"])
        loss, grads = torch_step(model, x, target, dense)
        exact_loss, exact = torch_step(copy.deepcopy(model).double(), x.double(),
                                       target.double() if dense else target, dense)
        ours = {n: step.fetched[n + "/grad"] for n in grads}
        cells["parity"] = (f"loss {step.loss:.5g} / {loss:.5g} / {exact_loss:.5g}; gradients "
                           f"{distance(ours, exact)} / {distance(grads, exact)}")
    except Exception as e:
        cells["parity"] = "failed: " + short(e)
        return cells
    try:
        cells["lms"] = lms_check(path, shape, feeds, dense)
    except Exception as e:
        cells["lms"] = "failed: " + short(e)
    if args.ratio:
        capacity = lms.parse_bytes(args.capacity) * CAPACITY_SCALE.get(name, 1)
        without = largest_batch(path, shape, capacity, False, dense)
        with_lms = largest_batch(path, shape, capacity, True, dense)
        ratio = f"{'>= ' if with_lms >= LIMIT else ''}{with_lms / without:.2f}x" if without else "-"
        at = "" if name not in CAPACITY_SCALE else f" at {lms.format_bytes(capacity)}"
        cells["ratio"] = f"{batch_text(without)} / {batch_text(with_lms)} ({ratio}){at}"
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--ratio", action="store_true", help="also the largest batches")
    parser.add_argument("--capacity", default="1GiB", help="device capacity of --ratio")
    parser.add_argument("--out", default="", help="write the Markdown table here")
    args = parser.parse_args()
    wanted = set(filter(None, args.models.split(",")))
    print(f"torchvision_coverage: seed {SEED}, torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}, batch {BATCH}", flush=True)
    header = ("| model | input | imported | one step: loss lms / PyTorch / float64; gradients' "
              "error from float64, lms / PyTorch | LMS at the midpoint "
              f"budget | largest batch at {args.capacity}: without / with LMS |")
    lines = [header, "|---|---|---|---|---|---|"]
    print(header, flush=True)
    with tempfile.TemporaryDirectory(prefix="lms_coverage") as work:
        for name, kwargs, shape in MODELS:
            if wanted and name not in wanted:
                continue
            start = time.time()
            try:
                c = row(name, kwargs, shape, args, work)
            except Exception:
                traceback.print_exc()
                c = {"model": name, "input": "x".join(map(str, shape)),
                     "imported": "script error", "parity": "", "lms": "", "ratio": ""}
            line = (f"| {c['model']} | {c['input']} | {c['imported']} | {c['parity']} | "
                    f"{c['lms']} | {c['ratio']} |")
            lines.append(line)
            print(line, f"<!-- {time.time() - start:.0f} s -->", flush=True)
            for f in os.listdir(work):
                os.remove(os.path.join(work, f))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
