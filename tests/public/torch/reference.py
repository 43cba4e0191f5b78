#!/usr/bin/python3
"""PyTorch references for the op tests of tests/public (torch_reference.h).

Usage: reference.py IN OUT. IN holds one "op NAME" line, "attr KEY NUMBERS..."
lines and "tensor NAME RANK DIMS... VALUES..." lines (float32 written with
nine significant digits, so they read back exactly); OUT gets the result
tensors in the same form. Each op computes its forward output and the
gradients of mse_loss(output, target) (PyTorch's mean reduction), the loss
that the C++ tests train with; cross_entropy gives F.cross_entropy and the
gradient of its logits, and mlp_cross_entropy_sgd trains a small classifier
with it. Exit status 77: torch is not importable.
"""
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(77)


def read(path):
    op, attrs, tensors = None, {}, {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "op":
                op = words[1]
            elif words[0] == "attr":
                attrs[words[1]] = [float(v) for v in words[2:]]
            elif words[0] == "tensor":
                rank = int(words[2])
                dims = [int(d) for d in words[3:3 + rank]]
                values = [float(v) for v in words[3 + rank:]]
                tensors[words[1]] = torch.tensor(values, dtype=torch.float32).reshape(dims)
    return op, attrs, tensors


def write(path, tensors):
    with open(path, "w") as f:
        for name, t in tensors.items():
            t = t.detach().contiguous().to(torch.float32)
            dims = " ".join(str(d) for d in t.shape)
            values = " ".join("%.9g" % v for v in t.reshape(-1).tolist())
            f.write("tensor %s %d %s %s\n" % (name, t.dim(), dims, values))


def trained(output, target, params):
    """The output, the loss and the gradient of each named parameter."""
    loss = F.mse_loss(output, target)
    loss.backward()
    result = {"y": output, "loss": loss}
    for name, p in params.items():
        result[name + "/grad"] = p.grad
    return result


def linear(attrs, t):
    params = {k: t[k].clone().requires_grad_(True) for k in ("x", "w", "b") if k in t}
    w = params["w"] if attrs["trans_b"] == [1.0] else params["w"].t()
    y = F.linear(params["x"], w, params.get("b"))
    return trained(y, t["target"], params)


def matmul(attrs, t):
    """torch.matmul(op(a), op(b)), op transposing the last two dims where
    attrs["trans_a"] / attrs["trans_b"] say; batch dims broadcast."""
    params = {k: t[k].clone().requires_grad_(True) for k in ("a", "b")}
    a = params["a"].transpose(-1, -2) if attrs["trans_a"] == [1.0] else params["a"]
    b = params["b"].transpose(-1, -2) if attrs["trans_b"] == [1.0] else params["b"]
    return trained(torch.matmul(a, b), t["target"], params)


def avg_pool(attrs, t):
    params = {"x": t["x"].clone().requires_grad_(True)}
    ints = {k: [int(v) for v in attrs[k]] for k in ("kernel", "stride", "pad")}
    pool = F.avg_pool2d if len(ints["kernel"]) == 2 else F.avg_pool3d
    y = pool(params["x"], ints["kernel"], ints["stride"], ints["pad"],
             ceil_mode=attrs.get("ceil_mode", [0.0]) == [1.0],
             count_include_pad=attrs["count_include_pad"] == [1.0])
    return trained(y, t["target"], params)


def clip(attrs, t):
    params = {"x": t["x"].clone().requires_grad_(True)}
    y = F.hardtanh(params["x"], attrs["min"][0], attrs["max"][0])
    return trained(y, t["target"], params)


def gelu(attrs, t):
    """The exact (erf) GELU, PyTorch's default approximate='none'."""
    params = {"x": t["x"].clone().requires_grad_(True)}
    y = F.gelu(params["x"], approximate="none")
    return trained(y, t["target"], params)


def cast(attrs, t):
    """y = x.to(torch.bfloat16).to(torch.float32), or through torch.float16
    where attrs["f16"] is [1]: the value rounded to the 2-byte float (nearest,
    ties to even) and widened; autograd casts the gradient back the same way.
    Also "h_bits": the 2-byte float's bit patterns, as float32 integers."""
    dtype = torch.float16 if attrs.get("f16") == [1.0] else torch.bfloat16
    params = {"x": t["x"].clone().requires_grad_(True)}
    h = params["x"].to(dtype)
    result = trained(h.to(torch.float32), t["target"], params)
    result["h_bits"] = h.detach().view(torch.int16).to(torch.int32).bitwise_and(0xFFFF)
    return result


def broadcast(attrs, t):
    """y = a + b or a * b (attrs["mul"]), one operand broadcast by PyTorch's
    (NumPy's) rules; autograd sums its gradient over the broadcast axes."""
    params = {k: t[k].clone().requires_grad_(True) for k in ("a", "b")}
    a, b = params["a"], params["b"]
    y = a * b if attrs["mul"] == [1.0] else a + b
    return trained(y, t["target"], params)


def layer_norm(attrs, t):
    """F.layer_norm over the last axis with weight (gamma) and bias (beta)."""
    params = {k: t[k].clone().requires_grad_(True) for k in ("x", "gamma", "beta")}
    x = params["x"]
    y = F.layer_norm(x, [x.shape[-1]], params["gamma"], params["beta"], attrs["eps"][0])
    return trained(y, t["target"], params)


def attention(attrs, t):
    """softmax(q @ k^T * scale + mask) @ v over the last axis, mask -inf
    above the diagonal when causal (torch 1.13 has no
    F.scaled_dot_product_attention), in float64 so that the reference's own
    rounding is far below the tolerances."""
    params = {k: t[k].double().requires_grad_(True) for k in ("q", "k", "v")}
    scores = params["q"] @ params["k"].transpose(-2, -1) * attrs["scale"][0]
    if attrs["causal"] == [1.0]:
        tq, sk = scores.shape[-2], scores.shape[-1]
        upper = torch.ones(tq, sk, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(upper, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ params["v"]
    return trained(y, t["target"].double(), params)


def reshape(attrs, t):
    params = {"x": t["x"].clone().requires_grad_(True)}
    y = params["x"].reshape([int(v) for v in attrs["shape"]])
    return trained(y, t["target"], params)


def transpose(attrs, t):
    params = {"x": t["x"].clone().requires_grad_(True)}
    y = params["x"].permute([int(v) for v in attrs["perm"]])
    return trained(y, t["target"], params)


def conv(attrs, t):
    params = {k: t[k].clone().requires_grad_(True) for k in ("x", "w", "b") if k in t}
    ints = {k: [int(v) for v in attrs[k]] for k in ("stride", "pad", "dilation")}
    fn = F.conv2d if params["x"].dim() == 4 else F.conv3d
    y = fn(params["x"], params["w"], params.get("b"), ints["stride"], ints["pad"],
           ints["dilation"], int(attrs["group"][0]))
    return trained(y, t["target"], params)


def cross_entropy(attrs, t):
    """F.cross_entropy (reduction mean) and its gradient for the logits; the
    labels come as floats holding integers."""
    logits = t["logits"].clone().requires_grad_(True)
    labels = t["labels"].to(torch.int64)
    # Classes on the last axis: [N,T,C] logits are N*T rows.
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=int(attrs["ignore_index"][0]))
    loss.backward()
    return {"loss": loss, "logits/grad": logits.grad}


def head_cross_entropy(attrs, t):
    """A language-model head and its loss, unchunked: F.cross_entropy of
    x @ w.T over every position (ignore_index -100), in float64. Tied
    (attr tied = 1): x = embedding(ids, w) + p, so that w's gradient sums the
    embedding's and the head's. Gives the loss and the gradients of the
    trained tensors."""
    params = {k: t[k].double().requires_grad_(True) for k in ("x", "w", "p") if k in t}
    labels = t["labels"].to(torch.int64)
    if attrs["tied"] == [1.0]:
        x = F.embedding(t["ids"].to(torch.int64), params["w"]) + params["p"]
    else:
        x = params["x"]
    logits = x @ params["w"].T
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)
    loss.backward()
    result = {"loss": loss.detach()}
    for k, v in params.items():
        result[k + "/grad"] = v.grad
    return result


def mlp_cross_entropy_sgd(attrs, t):
    """fc2(relu(fc1(x))) (nn.Linear layout, w[K,C]) trained with
    F.cross_entropy and torch.optim.SGD with momentum for `steps` steps on one
    batch: the loss of each step and the parameters after the last."""
    names = ("fc1/w", "fc1/b", "fc2/w", "fc2/b")
    params = {k: t[k].clone().requires_grad_(True) for k in names}
    labels = t["labels"].to(torch.int64)
    opt = torch.optim.SGD(params.values(), lr=attrs["lr"][0], momentum=attrs["momentum"][0])
    losses = []
    for _ in range(int(attrs["steps"][0])):
        opt.zero_grad()
        h = F.relu(F.linear(t["x"], params["fc1/w"], params["fc1/b"]))
        loss = F.cross_entropy(F.linear(h, params["fc2/w"], params["fc2/b"]), labels)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    result = {"losses": torch.stack(losses)}
    result.update(params)
    return result


def conv_bn_relu(attrs, t):
    """conv (3x3, pad 1, bias) -> BatchNorm2d -> relu, trained `steps` steps
    of SGD with momentum on mse_loss against the target (one batch, fed
    every step); then the model in eval mode on the same input. Returns the
    losses, the trained parameters and running statistics and the eval
    output."""
    w, b = t["w"], t["b"]
    bn = torch.nn.BatchNorm2d(w.shape[0], eps=attrs["eps"][0], momentum=attrs["bn_momentum"][0])
    conv = torch.nn.Conv2d(w.shape[1], w.shape[0], w.shape[2], padding=w.shape[2] // 2)
    with torch.no_grad():
        conv.weight.copy_(w)
        conv.bias.copy_(b)
        bn.weight.copy_(t["gamma"])
        bn.bias.copy_(t["beta"])
        bn.running_mean.copy_(t["running_mean"])
        bn.running_var.copy_(t["running_var"])
    model = torch.nn.Sequential(conv, bn, torch.nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), lr=attrs["lr"][0], momentum=attrs["momentum"][0])
    model.train()
    losses = []
    for _ in range(int(attrs["steps"][0])):
        opt.zero_grad()
        loss = F.mse_loss(model(t["x"]), t["target"])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    model.eval()
    with torch.no_grad():
        y_eval = model(t["x"])
    return {"loss": torch.stack(losses), "w": conv.weight, "b": conv.bias, "gamma": bn.weight,
            "beta": bn.bias, "running_mean": bn.running_mean, "running_var": bn.running_var,
            "y_eval": y_eval}


def small_cnn(p, x):
    """The model of tests/public/autocast_test.cc: conv -> batch norm -> relu
    -> max pool -> conv -> relu -> + the pooled skip -> global average pool
    -> linear (nn.Linear layout, w[K,C])."""
    h = F.conv2d(x, p["conv1/w"], p["conv1/b"], padding=1)
    h = F.relu(F.batch_norm(h, None, None, p["bn/gamma"], p["bn/beta"], training=True))
    skip = F.max_pool2d(h, 2)
    h = F.relu(F.conv2d(skip, p["conv2/w"], p["conv2/b"], padding=1)) + skip
    h = F.adaptive_avg_pool2d(h, 1).flatten(1)
    return F.linear(h, p["fc/w"], p["fc/b"])


def autocast_cnn(attrs, t):
    """small_cnn trained `steps` steps of SGD with momentum on cross-entropy
    under torch.autocast("cpu", dtype=torch.bfloat16): the loss of each step
    and the gradients of the first. The same first step in float64 (no
    autocast) gives the exact loss and gradients ("<name>/exact")."""
    names = ("conv1/w", "conv1/b", "bn/gamma", "bn/beta", "conv2/w", "conv2/b", "fc/w", "fc/b")
    labels = t["labels"].to(torch.int64)
    exact = {k: t[k].double().clone().requires_grad_(True) for k in names}
    loss64 = F.cross_entropy(small_cnn(exact, t["x"].double()), labels)
    loss64.backward()
    params = {k: t[k].clone().requires_grad_(True) for k in names}
    opt = torch.optim.SGD(params.values(), lr=attrs["lr"][0], momentum=attrs["momentum"][0])
    result = {"loss/exact": loss64.detach().float()}
    losses = []
    for step in range(int(attrs["steps"][0])):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(small_cnn(params, t["x"]), labels)
        loss.backward()
        if step == 0:
            for k in names:
                result[k + "/grad"] = params[k].grad.clone()
                result[k + "/grad/exact"] = exact[k].grad.float()
        opt.step()
        losses.append(loss.detach().float())
    result["losses"] = torch.stack(losses)
    return result


OPS = {"conv": conv, "conv_bn_relu": conv_bn_relu, "linear": linear, "avg_pool": avg_pool,
       "clip": clip, "gelu": gelu, "reshape": reshape, "broadcast": broadcast,
       "cross_entropy": cross_entropy, "mlp_cross_entropy_sgd": mlp_cross_entropy_sgd,
       "transpose": transpose, "layer_norm": layer_norm, "matmul": matmul,
       "attention": attention, "head_cross_entropy": head_cross_entropy, "cast": cast, "autocast_cnn": autocast_cnn}


def main():
    op, attrs, tensors = read(sys.argv[1])
    torch.manual_seed(0)
    write(sys.argv[2], OPS[op](attrs, tensors))


if __name__ == "__main__":
    main()
