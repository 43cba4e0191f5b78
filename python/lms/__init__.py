"""lms: Large Model Support for training on a memory-limited device.

Train a network whose activations do not fit in device memory: lms.rewrite
plans, per activation, to keep it, swap it out to pinned host memory and
prefetch it back, or recompute it, so that the step's peak fits the device,
with results bit-identical to training without LMS.

    import lms
    m = lms.import_onnx("model.onnx", inputs={"input": (64, 3, 224, 224)})
    lms.attach_loss(m.graph, m.outputs[0], lms.CrossEntropy())
    train = lms.training_graph(m.graph, lms.Sgd(lr=0.1, momentum=0.9))
    device = lms.cpu_device(capacity="1GiB")
    report = lms.rewrite(train, lms.LmsConfig(), device)
    session = lms.Session(train, device)
    step = session.run({"input": x, "labels": y})    # NumPy float32 / int64

Errors are exceptions carrying the library's message: ValueError for bad
input, MemoryError when device or pinned memory runs out, RuntimeError for the
rest. lms.torch (needs torch and onnx) exports a PyTorch model and moves
weights between it and a session.
"""

from ._lms import (
    Adam,
    CrossEntropy,
    Device,
    Graph,
    ImportedModel,
    LmsConfig,
    LossScaling,
    Mse,
    PlanningFacts,
    RewriteReport,
    Session,
    Sgd,
    SoftDice,
    StepPlan,
    StepResult,
    attach_loss,
    autocast,
    cpu_device,
    cuda_device,
    format_bytes,
    gather_facts,
    import_onnx,
    models,
    parse_bytes,
    parse_graph,
    plan_step,
    rewrite,
    training_graph,
)

__version__ = "0.1.0"

__all__ = [
    "Adam",
    "CrossEntropy",
    "Device",
    "Graph",
    "ImportedModel",
    "LmsConfig",
    "LossScaling",
    "Mse",
    "PlanningFacts",
    "RewriteReport",
    "Session",
    "Sgd",
    "SoftDice",
    "StepPlan",
    "StepResult",
    "attach_loss",
    "autocast",
    "cpu_device",
    "cuda_device",
    "format_bytes",
    "gather_facts",
    "import_onnx",
    "models",
    "parse_bytes",
    "parse_graph",
    "plan_step",
    "rewrite",
    "training_graph",
]
