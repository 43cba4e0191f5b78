"""PyTorch -> lms -> PyTorch: a model exported with lms.torch.export trains
one step in lms as it does in PyTorch (the reference), and its weights come
back with lms.torch.load_state_dict so that PyTorch's forward equals lms's."""
import numpy as np
import pytest

import lms

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
import lms.torch  # noqa: E402

TOLERANCE = 1e-4  # relative L2 error, float32


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)


class Net(torch.nn.Module):
    """Not a model lms was tuned on: conv, batch norm, max-pool, two linears."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc1 = torch.nn.Linear(8 * 4 * 4, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


def test_one_step_matches_pytorch_and_weights_round_trip(tmp_path):
    seed = 11
    print(f"seed {seed}")
    torch.manual_seed(seed)
    model = Net()
    x = torch.randn(6, 3, 8, 8)
    labels = torch.randint(0, 5, (6,))
    path = lms.torch.export(model, torch.zeros(2, 3, 8, 8), str(tmp_path / "net.onnx"))

    m = lms.import_onnx(path, inputs={"input": (6, 3, 8, 8)})
    assert sorted(m.parameters) == sorted(n for n, _ in model.named_parameters())
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy())
    train = lms.training_graph(m.graph, lms.Sgd(lr=0.1, momentum=0.9))
    device = lms.cpu_device(capacity="64MiB")
    session = lms.Session(train, device)
    step = session.run({"input": x.numpy(), "labels": labels.numpy()})

    reference = Net()
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    loss = torch.nn.functional.cross_entropy(reference(x), labels)
    loss.backward()
    opt.step()
    assert abs(step.loss - loss.item()) <= TOLERANCE * abs(loss.item())

    copied = lms.torch.load_state_dict(model, session)
    assert "conv.weight" in copied and "bn.running_mean" in copied
    for name, value in reference.state_dict().items():
        if torch.is_floating_point(value):
            assert rel_l2(model.state_dict()[name], value) < TOLERANCE, name

    # lms's forward graph with the trained weights, against PyTorch's forward.
    forward = lms.import_onnx(path, inputs={"input": (6, 3, 8, 8)})
    evaluation = lms.Session(forward.graph, lms.cpu_device(capacity="64MiB"),
                             fetches=forward.outputs)
    lms.torch.load_state_dict(evaluation, model)
    y = evaluation.run({"input": x.numpy()}).fetched[forward.outputs[0]]
    with torch.no_grad():
        expected = model(x).numpy()
    assert y.shape == expected.shape
    assert rel_l2(y, expected) < TOLERANCE

    state = lms.torch.state_dict(session)
    assert isinstance(state["fc2.bias"], torch.Tensor)


def test_export_refuses_an_unknown_trainable_name(tmp_path):
    with pytest.raises(ValueError, match="not parameters of the model"):
        lms.torch.export(Net(), torch.zeros(1, 3, 8, 8), str(tmp_path / "n.onnx"),
                         trainable=["conv.weight", "head.weight"])


def test_frozen_parameters_are_state_not_trained(tmp_path):
    model = Net()
    path = lms.torch.export(model, torch.zeros(2, 3, 8, 8), str(tmp_path / "n.onnx"),
                            trainable=["fc2.weight", "fc2.bias"])
    m = lms.import_onnx(path, inputs={"input": (2, 3, 8, 8)})
    assert sorted(m.parameters) == ["fc2.bias", "fc2.weight"]
    assert "conv.weight" in m.state


def net_with_loss(tmp_path, seed):
    """A Net exported, imported with its cross-entropy, and a batch."""
    print(f"seed {seed}")
    torch.manual_seed(seed)
    model = Net()
    x = torch.randn(6, 3, 8, 8)
    labels = torch.randint(0, 5, (6,))
    path = lms.torch.export(model, torch.zeros(2, 3, 8, 8), str(tmp_path / "net.onnx"))
    m = lms.import_onnx(path, inputs={"input": (6, 3, 8, 8)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy())
    return model, m, {"input": x.numpy(), "labels": labels.numpy()}


def test_autocast_bf16_trains_as_torch_autocast(tmp_path):
    # Net in bf16 (lms.autocast) against torch.autocast("cpu", bfloat16):
    # five steps' losses within bf16's rounding, and the weights move the
    # same way; an unknown dtype is a ValueError that leaves the graph be.
    model, m, feeds = net_with_loss(tmp_path, 12)
    text = m.graph.to_text()
    with pytest.raises(ValueError, match="bfloat16"):
        lms.autocast(m.graph, "int8")
    assert m.graph.to_text() == text
    report = lms.autocast(m.graph, "bfloat16")
    assert report["low_precision_nodes"] >= 3 and report["casts_added"] > 0
    assert m.graph.ops().count("cast") == report["casts_added"]
    assert " bf16[" in m.graph.to_text()
    train = lms.training_graph(m.graph, lms.Sgd(lr=0.1, momentum=0.9))
    session = lms.Session(train, lms.cpu_device(capacity="64MiB"))

    reference = Net()
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    x, labels = torch.from_numpy(feeds["input"]), torch.from_numpy(feeds["labels"])
    for step in range(5):
        got = session.run(feeds).loss
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(reference(x), labels)
        loss.backward()
        opt.step()
        assert abs(got - loss.item()) <= 3e-2 * abs(loss.item()), step
    lms.torch.load_state_dict(model, session)
    moved = rel_l2(model.fc2.weight.detach(), reference.fc2.weight.detach())
    assert moved < 3e-2


def test_float16_needs_loss_scaling_and_trains_with_it(tmp_path):
    # Net in float16: training_graph refuses it without lms.LossScaling;
    # with it, five steps lower the loss and the scale state is there.
    _, m, feeds = net_with_loss(tmp_path, 13)
    lms.autocast(m.graph, "float16")
    with pytest.raises(ValueError, match="loss_scaling"):
        lms.training_graph(m.graph, lms.Sgd(lr=0.1, momentum=0.9))
    train = lms.training_graph(m.graph, lms.Sgd(lr=0.1, momentum=0.9),
                               loss_scaling=lms.LossScaling(init_scale=1024.0))
    session = lms.Session(train, lms.cpu_device(capacity="64MiB"))
    losses = [session.run(feeds).loss for _ in range(5)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert float(np.ravel(session.read("amp/scale"))[0]) == 1024.0


class MobileBlock(torch.nn.Module):
    """Idioms of MobileNet V3, SqueezeNet and MNASNet that Net lacks: a
    ceil_mode max-pool, Hardswish, a squeeze-and-excitation gate with
    Hardsigmoid, and x.mean(dim=(2, 3)) without keepdim."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.reduce = torch.nn.Conv2d(8, 4, 1)
        self.expand = torch.nn.Conv2d(4, 8, 1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(self.conv(x), 3, 2, ceil_mode=True)
        x = torch.nn.functional.hardswish(x)
        s = x.mean(dim=(2, 3), keepdim=True)
        s = torch.nn.functional.hardsigmoid(self.expand(torch.relu(self.reduce(s))))
        return self.fc((x * s).mean(dim=(2, 3)))


def test_mobile_idioms_train_as_in_pytorch(tmp_path):
    seed = 29
    print(f"seed {seed}")
    torch.manual_seed(seed)
    model = MobileBlock()
    x = torch.randn(6, 3, 10, 10)
    labels = torch.randint(0, 5, (6,))
    path = lms.torch.export(model, torch.zeros(6, 3, 10, 10), str(tmp_path / "mobile.onnx"))
    m = lms.import_onnx(path, inputs={"input": (6, 3, 10, 10)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy())
    session = lms.Session(lms.training_graph(m.graph, lms.Sgd(lr=0.1)),
                          lms.cpu_device(capacity="64MiB"))
    reference = MobileBlock()
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        got = session.run({"input": x.numpy(), "labels": labels.numpy()}).loss
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(reference(x), labels)
        loss.backward()
        opt.step()
        assert abs(got - loss.item()) <= TOLERANCE * abs(loss.item()), step


class TinyLm(torch.nn.Module):
    """A language model's shape with a vocabulary far wider than its width:
    embedding, a layer norm, an untied head."""

    def __init__(self, vocab=500, width=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, width)
        self.ln = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        return self.head(self.ln(self.tok(ids)))


def test_chunked_head_trains_as_pytorch(tmp_path):
    seed = 13
    print(f"seed {seed}")
    torch.manual_seed(seed)
    model = TinyLm()
    ids = torch.randint(0, 500, (2, 12))
    labels = torch.randint(0, 500, (2, 12))
    labels[0, :3] = -100  # ignored positions
    path = lms.torch.export(model, torch.zeros(2, 12, dtype=torch.int64),
                            str(tmp_path / "lm.onnx"))
    m = lms.import_onnx(path, inputs={"input": (2, 12)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy(classes_last=True))
    train = lms.training_graph(m.graph, lms.Sgd(lr=0.5))
    device = lms.cpu_device(capacity="64MiB")
    lms.rewrite(train, lms.LmsConfig(enabled=False, chunked_head=True), device)
    ops = train.ops()
    assert "linear_cross_entropy" in ops and "softmax_cross_entropy" not in ops
    session = lms.Session(train, device)
    step = session.run({"input": ids.numpy(), "labels": labels.numpy()})

    reference = TinyLm()
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    loss = torch.nn.functional.cross_entropy(reference(ids).reshape(-1, 500), labels.reshape(-1))
    loss.backward()
    opt.step()
    assert abs(step.loss - loss.item()) <= TOLERANCE * abs(loss.item())
    lms.torch.load_state_dict(model, session)
    for name, value in reference.state_dict().items():
        assert rel_l2(model.state_dict()[name], value) < TOLERANCE, name
