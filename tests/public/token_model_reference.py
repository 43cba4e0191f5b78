#!/usr/bin/python3
"""PyTorch reference of the token model in tests/public/token_model_test.cc.

The model, as token_forward() builds it in lms (rank-3 [N,T,D] float tensors,
int64 ids, ops along the last axis):

    x    = embedding(ids, table)                    [N,T,D]
    h    = x * w + b                                w, b [N,T,D]
    r    = concat(h[..., D/2:], h[..., :D/2], -1)   halves swapped
    p    = softmax(r, -1)
    m    = mean(p, 1, keepdim)                      [N,1,D]
    loss = mean((m - target)^2)

Draws the weights, ids and target from fixed seeds (printed), rounds every
input to float32, evaluates the loss and the gradient of every parameter in
float64 (so the reference carries no float32 rounding of its own), and writes
inputs and results to a text fixture that TokenModel.MatchesThePyTorchReference
reads. Ids are drawn from [0, V-1), so the table's last row is never looked up
and its gradient is zero.

Fixture lines: `# ...` comments (ignored by readers), then one tensor a line:
`<name> <dtype> <shape as d0,d1,...; [] for a scalar> <values, row-major>`;
f32 values print with 9 significant digits (they read back to the same
float), f64 values with 17.

Needs Debian's python3-torch, which installs for /usr/bin/python3:
    /usr/bin/python3 tests/public/token_model_reference.py --out tests/data/token_model_reference.txt
    /usr/bin/python3 tests/public/token_model_reference.py --check tests/data/token_model_reference.txt
--check regenerates the fixture in memory and compares it with the file: the
inputs must be equal, the results within a relative L2 error of 1e-12. Exit
status 0 when they agree, 1 when not (naming the tensor), 2 for bad usage,
77 (CTest's skip) when torch cannot be imported.
"""

import argparse
import math
import sys

SKIP = 77
SEED = 4244
BATCH, TOKENS, DIM, VOCAB = 2, 6, 8, 9
OUTPUT_RTOL = 1e-12


def make_inputs(torch):
    """The weights, ids and target, float32 (ids int64), from SEED."""
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, VOCAB - 1, (BATCH, TOKENS), generator=gen, dtype=torch.int64)
    table = torch.randn(VOCAB, DIM, generator=gen) * math.sqrt(2.0 / DIM)
    w = torch.randn(BATCH, TOKENS, DIM, generator=gen) * 2.0
    b = torch.rand(BATCH, TOKENS, DIM, generator=gen) * 0.5 - 0.25
    target = torch.rand(BATCH, 1, DIM, generator=gen) * (2.0 / DIM)
    return {"ids": ids, "target": target.float(), "table": table.float(), "w": w.float(),
            "b": b.float()}


def evaluate(torch, inputs):
    """The loss and d loss / d (table, w, b), in float64."""
    params = {k: inputs[k].double().requires_grad_(True) for k in ("table", "w", "b")}
    x = params["table"][inputs["ids"]]
    h = x * params["w"] + params["b"]
    half = DIM // 2
    r = torch.cat([h[..., half:], h[..., :half]], dim=-1)
    p = torch.softmax(r, dim=-1)
    m = p.mean(dim=1, keepdim=True)
    loss = ((m - inputs["target"].double()) ** 2).mean()
    loss.backward()
    out = {"loss": loss.detach()}
    for k, v in params.items():
        out[k + "/grad"] = v.grad.detach()
    return out


def tensor_line(name, t):
    dtype = {"torch.int64": "i64", "torch.float32": "f32", "torch.float64": "f64"}[str(t.dtype)]
    shape = "[]" if t.dim() == 0 else ",".join(str(d) for d in t.shape)
    fmt = {"i64": "{:d}", "f32": "{:.9g}", "f64": "{:.17g}"}[dtype]
    values = " ".join(fmt.format(v) for v in t.flatten().tolist())
    return f"{name} {dtype} {shape} {values}"


def fixture_text(torch):
    torch.set_num_threads(1)  # one summation order
    inputs = make_inputs(torch)
    outputs = evaluate(torch, inputs)
    lines = [
        "# Written by tests/public/token_model_reference.py; do not edit (run it with --out).",
        f"# PyTorch {torch.__version__}, seed {SEED}, N={BATCH} T={TOKENS} D={DIM} V={VOCAB};"
        " inputs f32 (ids i64), results computed in f64.",
    ]
    for name in ("ids", "target", "table", "w", "b"):
        lines.append(tensor_line(name, inputs[name]))
    for name in ("loss", "table/grad", "w/grad", "b/grad"):
        lines.append(tensor_line(name, outputs[name]))
    return "\n".join(lines) + "\n"


def parse(text):
    """{name: (dtype, shape, [values])} of a fixture's tensor lines."""
    tensors = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, dtype, shape, *values = line.split()
        conv = int if dtype == "i64" else float
        tensors[name] = (dtype, shape, [conv(v) for v in values])
    return tensors


def compare(want_text, have_text):
    """Differences between the regenerated fixture (want) and the file (have)."""
    want, have = parse(want_text), parse(have_text)
    problems = []
    if sorted(want) != sorted(have):
        problems.append(f"tensors {sorted(have)} in the file, {sorted(want)} regenerated")
    for name in want:
        if name not in have:
            continue
        (wd, ws, wv), (hd, hs, hv) = want[name], have[name]
        if (wd, ws, len(wv)) != (hd, hs, len(hv)):
            problems.append(f"{name}: {hd} [{hs}] x{len(hv)} in the file, {wd} [{ws}] x{len(wv)}"
                            " regenerated")
        elif wd != "f64" and wv != hv:
            problems.append(f"{name}: the inputs differ from the regenerated ones")
        elif wd == "f64":
            diff = math.sqrt(sum((a - b) ** 2 for a, b in zip(wv, hv)))
            norm = math.sqrt(sum(a * a for a in wv))
            if diff > OUTPUT_RTOL * norm:
                problems.append(f"{name}: relative L2 error {diff / max(norm, 1e-300):.3g} >"
                                f" {OUTPUT_RTOL:g}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", help="write the fixture to this file")
    mode.add_argument("--check", help="regenerate and compare with this fixture")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"skipped: {sys.executable} cannot import torch ({e}); install Debian's"
              " python3-torch")
        return SKIP
    print(f"seed {SEED}, PyTorch {torch.__version__}")
    text = fixture_text(torch)
    if args.out:
        with open(args.out, "w", encoding="ascii") as f:
            f.write(text)
        print(f"wrote {args.out}")
        return 0
    try:
        with open(args.check, encoding="ascii") as f:
            have = f.read()
    except OSError as e:
        print(f"{args.check}: {e}")
        return 1
    problems = compare(text, have)
    for p in problems:
        print(f"{args.check}: {p}")
    if problems:
        print("regenerate it: /usr/bin/python3 tests/public/token_model_reference.py --out"
              f" {args.check}")
        return 1
    print(f"{args.check} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
