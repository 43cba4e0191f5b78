"""The lms package through its public API: where it is installed, errors as
exceptions with the library's messages, configs, checkpoints and the GIL."""
import os
import threading
import time

import numpy as np
import pytest

import lms
from conftest import small_vdsr


def test_imports_the_installed_wheel_not_the_source_tree(source_dir):
    import sys
    here = os.path.realpath(lms.__file__)
    assert not here.startswith(os.path.realpath(os.path.join(source_dir, "python")) + os.sep), here
    assert here.startswith(os.path.realpath(sys.prefix) + os.sep), (here, sys.prefix)
    assert sys.prefix != sys.base_prefix  # a virtual environment
    assert "site-packages" in here


def test_a_step_fetches_numpy_arrays_and_statistics(rng):
    train, shape = small_vdsr()
    device = lms.cpu_device(capacity="64MiB")
    report = lms.rewrite(train, lms.LmsConfig(), device)
    assert report.fits
    session = lms.Session(train, device)
    x = rng.random(shape, dtype=np.float32)
    step = session.run({"lr": x, "hr": x})
    assert isinstance(step.loss, float) and np.isfinite(step.loss)
    assert step.fetched["loss"].dtype == np.float32 and step.fetched["loss"].shape == ()
    assert step.peak_device_bytes == report.peak_bytes_after
    assert device.memory_stats()["peak_bytes_in_use"] == report.peak_bytes_after
    w = session.read("conv1/w")
    assert w.shape == (8, 1, 3, 3) and w.dtype == np.float32


def test_bad_feeds_raise_value_error_naming_them_and_the_session_stays_usable(rng):
    train, shape = small_vdsr()
    device = lms.cpu_device(capacity="64MiB")
    session = lms.Session(train, device)
    x = rng.random(shape, dtype=np.float32)
    before = session.state_dict()
    with pytest.raises(ValueError, match=r"feed 'lr': the input is float32, the array float64"):
        session.run({"lr": x.astype(np.float64), "hr": x})
    with pytest.raises(ValueError, match=r"feed 'hr': the input has shape \(2, 1, 16, 16\)"):
        session.run({"lr": x, "hr": x[:1]})
    with pytest.raises(ValueError, match=r"feed 'high' names no graph input; the inputs: lr"):
        session.run({"lr": x, "high": x})
    with pytest.raises(ValueError, match=r"no feed for graph input 'hr'"):
        session.run({"lr": x})
    with pytest.raises(ValueError, match="expected a NumPy array"):
        session.run({"lr": x.tolist(), "hr": x})
    after = session.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    # Usable afterwards: the next step equals a first step of a fresh session.
    first = session.run({"lr": x, "hr": x}).loss
    fresh = lms.Session(small_vdsr()[0], lms.cpu_device(capacity="64MiB"))
    assert first == fresh.run({"lr": x, "hr": x}).loss


def test_strided_feeds_are_read_as_their_values(rng):
    train, shape = small_vdsr()
    device = lms.cpu_device(capacity="64MiB")
    a = lms.Session(train, device)
    b = lms.Session(train, lms.cpu_device(capacity="64MiB"))
    wide = rng.random(shape[:3] + (2 * shape[3],), dtype=np.float32)
    strided = wide[..., ::2]
    assert not strided.flags.c_contiguous
    assert a.run({"lr": strided, "hr": strided}).loss == \
        b.run({"lr": np.ascontiguousarray(strided), "hr": np.ascontiguousarray(strided)}).loss


def test_errors_map_to_python_exceptions(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'bogus'"):
        lms.LmsConfig(bogus=1)
    with pytest.raises(ValueError, match="policy"):
        lms.LmsConfig(policy="sometimes")
    with pytest.raises(ValueError, match="capacity"):
        lms.cpu_device(capacity="lots")
    not_onnx = tmp_path / "model.onnx"
    not_onnx.write_bytes(b"this is not a protobuf" * 10)
    with pytest.raises(ValueError, match="not a complete ModelProto"):
        lms.import_onnx(str(not_onnx))
    with pytest.raises(RuntimeError, match="NOT_FOUND"):
        lms.import_onnx(str(tmp_path / "missing.onnx"))
    train, _ = small_vdsr(batch=8, side=32, depth=6, channels=16)
    with pytest.raises(MemoryError, match="needs [0-9]+ bytes .* the usable device budget"):
        lms.rewrite(train, lms.LmsConfig(), lms.cpu_device(capacity="200KiB"))
    with pytest.raises(ValueError, match="has no loss"):
        lms.training_graph(lms.Graph(), lms.Sgd())


def test_config_keywords_file_and_failed_set(source_dir):
    cfg = lms.LmsConfig(device_memory_limit="200MiB", auto_actions="swap",
                        link={"h2d_bandwidth": "16GB/s"}, tensors=["a", "b"])
    assert cfg.device_memory_limit == 200 << 20
    assert cfg.auto_actions == "swap" and cfg.tensors == ["a", "b"]
    again = lms.LmsConfig.from_toml(cfg.to_toml())
    assert again.to_toml() == cfg.to_toml()
    example = lms.LmsConfig.from_file(os.path.join(source_dir, "configs", "lms.toml"))
    assert example.policy == "auto"
    before = cfg.to_toml()
    with pytest.raises(ValueError):
        cfg.set(enabled=False, swapin_ahead=0)
    assert cfg.to_toml() == before
    cfg.set(enabled=False)
    assert not cfg.enabled


def test_checkpoint_round_trip_and_a_bad_file_changes_nothing(rng, tmp_path):
    train, shape = small_vdsr()
    session = lms.Session(train, lms.cpu_device(capacity="64MiB"))
    x = rng.random(shape, dtype=np.float32)
    session.run({"lr": x, "hr": x})
    path = str(tmp_path / "v.ckpt")
    session.save_checkpoint(path, step=1, meta={"model": "vdsr"})
    saved = session.state_dict()
    second = session.run({"lr": x, "hr": x}).loss
    trained = session.state_dict()
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"LMSCKPT\0garbage")
    with pytest.raises(RuntimeError, match="DATA_LOSS"):
        session.load_checkpoint(str(junk))
    assert all(np.array_equal(trained[k], v) for k, v in session.state_dict().items())
    assert session.load_checkpoint(path) == 1
    assert all(np.array_equal(saved[k], v) for k, v in session.state_dict().items())
    assert session.run({"lr": x, "hr": x}).loss == second


def test_write_checks_name_dtype_and_shape(rng):
    train, _ = small_vdsr()
    session = lms.Session(train, lms.cpu_device(capacity="64MiB"))
    w = rng.random((8, 1, 3, 3), dtype=np.float32)
    session.write("conv1/w", w)
    assert np.array_equal(session.read("conv1/w"), w)
    with pytest.raises(KeyError):
        session.write("conv9/w", w)
    with pytest.raises(ValueError, match="float32"):
        session.write("conv1/w", w.astype(np.float64))
    with pytest.raises(ValueError, match=r"has shape \(8, 1, 3, 3\)"):
        session.load_state_dict({"conv1/b": np.zeros(8, np.float32), "conv1/w": w[:4]})
    assert np.array_equal(session.read("conv1/w"), w)  # nothing written


def test_run_releases_the_gil(rng):
    train, shape = small_vdsr(batch=8, side=96, depth=8, channels=32)
    session = lms.Session(train, lms.cpu_device(capacity="1GiB", threads=1))
    x = rng.random(shape, dtype=np.float32)
    session.run({"lr": x, "hr": x})
    steps = []
    worker = threading.Thread(
        target=lambda: steps.extend(session.run({"lr": x, "hr": x}).step_s for _ in range(3)))
    ticks = [time.perf_counter()]
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    step_s = min(steps)
    gap = max(b - a for a, b in zip(ticks, ticks[1:]))
    print(f"step {step_s * 1e3:.1f} ms, longest pause of the main thread {gap * 1e3:.1f} ms")
    assert step_s > 0.02
    assert gap < 0.5 * step_s


def test_the_type_stubs_name_every_public_function_class_and_member():
    import ast
    import lms._lms as native
    stub = os.path.join(os.path.dirname(lms.__file__), "_lms.pyi")
    tree = ast.parse(open(stub).read())
    declared = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            declared[node.name] = None
        elif isinstance(node, ast.ClassDef):
            declared[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    for name in lms.__all__:
        assert name in declared, f"{name} is not in _lms.pyi"
        value = getattr(native, name)
        if isinstance(value, type):
            members = {m for m in vars(value) if not m.startswith("_")}
            missing = members - declared[name]
            assert not missing, f"{name}: {sorted(missing)} are not in _lms.pyi"
        else:
            assert callable(value) or name == "models"
    for name in ("vdsr", "unet"):
        assert name in declared["models"]


def test_cuda_device_is_a_device_or_a_runtime_error():
    try:
        device = lms.cuda_device(capacity="64MiB")
    except RuntimeError as e:  # no GPU here, or a library built without CUDA
        print(f"no CUDA device: {e}")
        assert str(e)
        return
    assert device.kind == "cuda"
    assert device.memory_stats()["capacity_bytes"] == 64 << 20


def test_the_package_works_without_torch(rng):
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None; sys.modules['onnx'] = None\n"
            "import numpy as np, lms\n"
            "g = lms.training_graph(lms.models.vdsr(batch=2, height=8, width=8, depth=3,"
            " channels=4), lms.Sgd())\n"
            "s = lms.Session(g, lms.cpu_device(capacity='16MiB'))\n"
            "x = np.ones((2, 1, 8, 8), np.float32)\n"
            "print(s.run({'lr': x, 'hr': x}).loss)\n"
            "try:\n    import lms.torch\nexcept ImportError:\n    print('lms.torch needs torch')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "lms.torch needs torch" in out.stdout


def test_facts_gathered_once_plan_as_the_rewrite_gathers_them(rng):
    train, shape = small_vdsr()
    device = lms.cpu_device(capacity="64MiB")
    config = lms.LmsConfig(time_model="roofline")
    facts = lms.gather_facts(train, config, device)
    assert facts.device_capacity_bytes == device.memory_stats()["capacity_bytes"]
    assert facts.device_kind == device.kind
    assert len(facts.workspace_bytes) == train.num_nodes
    assert facts.node_time_s == [] and facts.measured_on == ""
    # Halfway between the working-set limit and the unplanned peak: the
    # plan must swap or recompute, whatever workspaces the kernels need.
    probe = train.copy()
    off = lms.LmsConfig(enabled=False)
    none = lms.rewrite(probe, off, device)
    config.set(device_memory_limit=(none.working_set_limit_bytes + none.peak_bytes_before) // 2)
    a, b = train.copy(), train.copy()
    itself = lms.rewrite(a, config, device)
    given = lms.rewrite(b, config, device, facts=facts)
    assert itself.swapped or itself.recomputed
    assert given.plan_text == itself.plan_text
    assert given.peak_bytes_after == itself.peak_bytes_after
    session = lms.Session(b, device)
    x = rng.random(shape, dtype=np.float32)
    assert np.isfinite(session.run({"lr": x, "hr": x}).loss)
    del session
    held = lms.Session(train.copy(), device)
    with pytest.raises(RuntimeError, match="FAILED_PRECONDITION"):
        lms.gather_facts(train, config, device)
    del held


def test_step_plan_runs_on_its_own_layout_and_leaves_the_graph(rng):
    train, shape = small_vdsr()
    device = lms.cpu_device(capacity="64MiB")
    off = lms.LmsConfig(enabled=False)
    none = lms.rewrite(train.copy(), off, device)
    config = lms.LmsConfig(time_model="roofline")
    config.set(device_memory_limit=(none.working_set_limit_bytes + none.peak_bytes_before) // 2)
    before = train.copy()
    plan = lms.plan_step(train, config, device)
    assert train.num_nodes == before.num_nodes  # the user's graph is unchanged
    assert plan.report.fits and (plan.report.swapped or plan.report.recomputed)
    assert ("swap_out" in plan.graph.ops()) == bool(plan.report.swapped)
    session = lms.Session(plan, device)
    assert session.reused_planned_layout
    x = rng.random(shape, dtype=np.float32)
    step = session.run({"lr": x, "hr": x})
    assert step.peak_device_bytes == plan.report.peak_bytes_after
    del session
    # The same plan through lms.rewrite: a session of the graph lays the step
    # out itself, at the same peak.
    rewritten = train.copy()
    lms.rewrite(rewritten, config, device)
    assert rewritten.to_text() == plan.graph.to_text()
    session = lms.Session(rewritten, device)
    assert not session.reused_planned_layout
    assert session.run({"lr": x, "hr": x}).peak_device_bytes == plan.report.peak_bytes_after
    del session
    with pytest.raises(ValueError, match="no_such_tensor"):
        lms.plan_step(train, lms.LmsConfig(policy="manual", tensors=["no_such_tensor"]), device)


def test_half_tensors_are_fed_and_fetched_as_float32():
    # bf16 and f16 tensors (cast, and inputs of those dtypes): NumPy sees
    # float32 arrays, rounded as torch's Tensor.to rounds: ties to even,
    # past f16's range to inf.
    graph = lms.parse_graph(
        "input x f32[4]\n"
        "input fed bf16[4]\n"
        'node h = cast(x) {to="f16"} -> h f16[4] activation\n'
        'node y = cast(h) {to="f32"} -> y f32[4] activation\n'
        'node b = cast(fed) {to="f32"} -> b f32[4] activation\n')
    assert graph.dtype("h") == "float16" and graph.dtype("fed") == "bfloat16"
    assert lms.parse_graph(graph.to_text()).to_text() == graph.to_text()
    x = np.array([1.0, 1.00390625, 65520.0, -2.0e-8], dtype=np.float32)
    session = lms.Session(graph, lms.cpu_device(capacity="16MiB"), fetches=["y", "fed", "b"])
    step = session.run({"x": x, "fed": x})
    assert step.fetched["y"].dtype == np.float32
    assert step.fetched["y"].tolist() == [1.0, 1.00390625, np.inf, -0.0]
    assert np.signbit(step.fetched["y"][3])
    # torch.tensor(x).to(torch.bfloat16).float()
    assert np.array_equal(step.fetched["fed"],
                          np.array([1.0, 1.0, 65536.0, -2.0023435e-08], dtype=np.float32))
    assert np.array_equal(step.fetched["b"], step.fetched["fed"])
    with pytest.raises(ValueError, match=r"feed 'fed': the input is float32"):
        session.run({"x": x, "fed": x.astype(np.float64)})
    with pytest.raises(ValueError, match=r"bf16\[\.\.\.\]"):
        lms.parse_graph("input x f8[4]\n")
