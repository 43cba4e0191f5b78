"""PyTorch interop: export a model for lms, and move weights by name.

    import lms, lms.torch
    lms.torch.export(model, torch.zeros(32, 3, 224, 224), "model.onnx")
    m = lms.import_onnx("model.onnx", inputs={"input": (64, 3, 224, 224)})
    ...train with an lms.Session...
    lms.torch.load_state_dict(model, session)    # the trained weights back into PyTorch

Needs torch and onnx; the rest of the lms package works without them.
"""

import numpy as _np

import onnx as _onnx
import torch as _torch

from ._lms import Session as _Session

#: The ONNX metadata entry that lists the trainable initializers; lms.import_onnx reads it.
TRAINABLE_KEY = "lms.trainable"


def export(model, example_inputs, path, trainable=None, input_names=None,
           output_names=("output",), dynamic_axes=None, opset_version=17):
    """Exports `model` to the ONNX file `path` as lms.import_onnx reads it.

    example_inputs: a tensor or a tuple of tensors, as for torch.onnx.export.
    trainable: names of the parameters to train (model.named_parameters()
      names); None: those with requires_grad. They are recorded in the file's
      metadata ("lms.trainable"), so the import trains them and keeps every
      other initializer (batch-norm running statistics) as state.
    input_names: default "input" for one input, "input0", "input1", ... for more.
    dynamic_axes: default axis 0 ("batch") of every input and output, so the
      model imports at any batch size.

    The export runs in training mode (BatchNormalization with its batch
    statistics, Dropout kept) with no constant folding, so every parameter
    keeps its PyTorch name. Returns `path`. ValueError for a trainable name
    the model does not have.
    """
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if input_names is None:
        input_names = ["input"] if len(inputs) == 1 else [f"input{k}" for k in range(len(inputs))]
    input_names, output_names = list(input_names), list(output_names)
    if dynamic_axes is None:
        dynamic_axes = {name: {0: "batch"} for name in input_names + output_names}
    names = [n for n, _ in model.named_parameters()]
    if trainable is None:
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    else:
        trainable = list(trainable)
        unknown = [n for n in trainable if n not in names]
        if unknown:
            raise ValueError(f"trainable: {unknown} are not parameters of the model; "
                             f"its parameters: {names}")
    was_training = model.training
    try:
        model.train()
        _torch.onnx.export(model, inputs, str(path), opset_version=opset_version,
                           training=_torch.onnx.TrainingMode.TRAINING,
                           do_constant_folding=False, input_names=input_names,
                           output_names=output_names, dynamic_axes=dynamic_axes)
    finally:
        model.train(was_training)
    proto = _onnx.load(str(path))
    entry = proto.metadata_props.add()
    entry.key = TRAINABLE_KEY
    entry.value = ",".join(trainable)
    _onnx.save(proto, str(path))
    return path


def state_dict(session):
    """The session's parameters and optimizer state as {name: torch.Tensor} (float32 copies)."""
    return {name: _torch.from_numpy(value) for name, value in session.state_dict().items()}


def load_state_dict(target, source, strict=True):
    """Copies weights by name, either way.

    load_state_dict(model, session): the session's tensors into the model's
      parameters and buffers of the same names (after lms training).
    load_state_dict(session, model_or_state_dict): the model's (or a torch
      state dict's) float tensors into the session's tensors of the same names.

    strict: every float tensor of the model must have a counterpart (KeyError
    names those missing); integer buffers (num_batches_tracked) are never
    copied. Shapes must match (ValueError). Nothing is written unless all
    checks pass. Returns the names copied.
    """
    if isinstance(target, _Session):
        state = source.state_dict() if isinstance(source, _torch.nn.Module) else source
        have = set(target.persistent_tensors)
        values, missing = {}, []
        for name, tensor in state.items():
            if not _torch.is_floating_point(tensor):
                continue
            if name in have:
                values[name] = _np.ascontiguousarray(
                    tensor.detach().to("cpu", _torch.float32).numpy())
            else:
                missing.append(name)
        if strict and missing:
            raise KeyError(f"the session has no tensors {missing}")
        target.load_state_dict(values)
        return sorted(values)
    if isinstance(source, _Session) and isinstance(target, _torch.nn.Module):
        have = set(source.persistent_tensors)
        own = target.state_dict()
        missing = [n for n, t in own.items() if _torch.is_floating_point(t) and n not in have]
        if strict and missing:
            raise KeyError(f"the session has no tensors {missing}")
        copied = {}
        for name, tensor in own.items():
            if not _torch.is_floating_point(tensor) or name not in have:
                continue
            value = _torch.from_numpy(source.read(name))
            if tuple(value.shape) != tuple(tensor.shape):
                raise ValueError(f"'{name}': the session's shape {tuple(value.shape)}, "
                                 f"the model's {tuple(tensor.shape)}")
            copied[name] = value.to(tensor.dtype)
        target.load_state_dict(copied, strict=False)
        return sorted(copied)
    raise TypeError("load_state_dict(model, session) or load_state_dict(session, model or "
                    "state dict)")
